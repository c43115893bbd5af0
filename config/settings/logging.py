"""Logging: JSON lines in production, plain text elsewhere; every line redacted."""

from __future__ import annotations

from config.settings.environment import PRODUCTION
from smsgw.config.env import env_choice, env_str

# --- logging --------------------------------------------------------------------------------------
# One JSON object per line (smsgw.runtime.logs_json) in production, plain text elsewhere; a line written
# while a web request is answered carries its Request-Id (smsgw.http.request_id) in both.
LOG_FORMAT = env_choice("SMSGW_LOG_FORMAT", "json" if PRODUCTION else "plain", ("json", "plain"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "smsgw.runtime.logs_json.PlainFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {"()": "smsgw.runtime.logs_json.JsonFormatter"},
    },
    "filters": {
        "repeat_limit": {"()": "smsgw.runtime.logs.RepeatLimit"},
        "quiet_ticks": {"()": "smsgw.runtime.logs.QuietTicks"},
        "redact": {"()": "smsgw.runtime.logs.Redact"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["repeat_limit", "quiet_ticks", "redact"],  # redact last: it merges the args
        }
    },
    # Django's default config gives "django" its own console handler (with DEBUG) that would print
    # django.request's tracebacks unredacted before the record reaches the root handler.
    "loggers": {"django": {"handlers": [], "level": "INFO", "propagate": True}},
    # The log level of everything smsgw and its libraries write (DEBUG, INFO, WARNING, ERROR).
    "root": {"handlers": ["console"], "level": env_str("SMSGW_LOG_LEVEL", "INFO")},
}
