"""gunicorn's own loggers (``gunicorn.access``, ``gunicorn.error``) have their own handlers and do not
propagate to the root logger, so settings.LOGGING's filters never see them; yet an access line holds
the request's path and query string (``/v1/messages?to=%2B14155550123``,
``/v1/capacity/senders/+14155550100``). Run gunicorn with ``--logger-class
smsgw.runtime.gunicorn_logging.RedactingLogger`` and those lines are redacted like every other
(smsgw.runtime.logs)."""

from __future__ import annotations

from gunicorn.glogging import Logger

from smsgw.runtime.logs import Redact


class RedactingLogger(Logger):
    def setup(self, cfg) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                if not any(isinstance(f, Redact) for f in handler.filters):
                    handler.addFilter(Redact())
