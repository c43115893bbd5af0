"""Log hygiene for long-running processes: a repeated error is written once per window, not several times
a second through an outage, and the periodic ticks (sweep, receipts, webhooks, probes) leave no INFO
line each time they run, so an idle gateway's logs stay quiet and a real event stands out.

Every line is also redacted (``Redact``, below): no message body, full phone number, metadata value or
secret, including in formatted exceptions.

Installed on every handler of the root logger: by ``LOGGING`` in the web processes, and through Celery's
``after_setup_logger`` signal in workers and beat (config.celery).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time

from smsgw.config import providers as provider_declarations

# Beat's ticks (the jobs table's ``tick`` column, config.settings.jobs: settings.SMSGW_TICK_TASKS): their
# "received", "succeeded", "Sending due task" and "Discarding revoked task" lines are dropped at INFO (a
# tick that waited past its expiry is discarded by design, a newer one covers the same work: a worker on
# every queue discarded several a second idle). SMSGW_LOG_TICKS=1 keeps them (debugging, and a test that
# counts runs).
_TICK_LOGGERS = frozenset(
    {"celery.app.trace", "celery.worker.strategy", "celery.worker.request", "celery.beat"}
)


class QuietTicks(logging.Filter):
    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        # SMSGW_LOG_TICKS=1 keeps the INFO lines of the periodic ticks (sweep, receipts, ...: several a
        # second), which are left out of the log by default.
        self.enabled = os.environ.get("SMSGW_LOG_TICKS", "") not in ("1", "true", "yes")

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.enabled or record.levelno != logging.INFO or record.name not in _TICK_LOGGERS:
            return True
        args = record.args
        from django.conf import settings

        ticks = settings.SMSGW_TICK_TASKS
        if isinstance(args, dict):  # celery.app.trace / strategy: {"name": task, "id": ...}
            return args.get("name") not in ticks
        if isinstance(args, tuple) and len(args) == 2 and str(record.msg).startswith("Scheduler: Sending"):
            return args[1] not in ticks
        if isinstance(args, tuple) and len(args) == 2 and str(record.msg).startswith("Discarding revoked"):
            return args[0] not in ticks  # celery.worker.request: (task name, id)
        return True


class RepeatLimit(logging.Filter):
    """A WARNING or worse with the same logger and message template as one written less than ``window``
    seconds ago is counted instead of written; the next one written says how many were left out."""

    def __init__(self, name: str = "", window: float | None = None) -> None:
        super().__init__(name)
        # Seconds within which a repeated warning (same logger, same template) is counted, not written.
        self.window = float(os.environ.get("SMSGW_LOG_REPEAT_WINDOW", "10")) if window is None else window
        self._seen: dict[tuple, list] = {}  # key -> [last written (monotonic), suppressed count]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or self.window <= 0:
            return True
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.window:
                seen[1] += 1
                return False
            left_out = seen[1] if seen is not None else 0
            self._seen[key] = [now, 0]
            if len(self._seen) > 1000:  # bounded: forget the oldest keys
                for old in sorted(self._seen, key=lambda k: self._seen[k][0])[:500]:
                    del self._seen[old]
        if left_out:
            record.msg = f"{record.getMessage()} [{left_out} more like this in the last {self.window:g} s]"
            record.args = None
        return True


def handlers_quiet(logger: logging.Logger | None = None) -> None:
    """Add the filters to every handler of ``logger`` (the root logger by default), once each, in this
    order: RepeatLimit and QuietTicks read the record's template and arguments, which Redact merges."""
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
        if not any(isinstance(f, RepeatLimit) for f in handler.filters):
            handler.addFilter(RepeatLimit())
        if not any(isinstance(f, QuietTicks) for f in handler.filters):
            handler.addFilter(QuietTicks())
        for f in [f for f in handler.filters if isinstance(f, Redact)] or [Redact()]:
            handler.removeFilter(f)  # (re)added last
            handler.addFilter(f)


# --- redaction: no body, full number, metadata value or secret in any log line -----------------------
# PostgreSQL's error text carries the row or the statement: ``DETAIL:  Failing row contains (…, +1415…,
# <body>, <metadata>…)``, ``DETAIL:  Key (idempotency_key)=(…) already exists``, ``LINE 1: …'<body>'…``,
# and psycopg (and Django's wrappers, which copy its message) put all of it in str(exc), so every log of
# such an exception, and every traceback Django (django.request, for a 500) or Celery writes, carried it.
# Only the first line of a database error is kept: it names the constraint, column or type, not the data.
_DB_DETAIL = re.compile(r"(\\n|\n)[ \t]*(?:DETAIL|HINT|CONTEXT|QUERY|WHERE|STATEMENT|LINE \d+):")
# Where a real multi-line exception message ends inside a formatted traceback (the detail may itself
# span lines: a body with a newline).
_TRACEBACK_RESUMES = re.compile(r"\n(?=\n|Traceback \(|The above exception|During handling)")
# First lines that quote a value: ``invalid input syntax for type integer: "…"``.
_DB_QUOTED = re.compile(
    r"((?:invalid input syntax for type [\w ]+|invalid input value for enum [\w.]+|at or near"
    r'|malformed [\w ]+ literal|character with byte sequence [^"]*?)[: ]*)"[^"\n]*"'
)
# E.164-looking runs (with +, or percent-encoded as %2B in a URL) and bare runs of 11-15 digits; the
# last two digits stay, like smsgw.values.phone.mask.
_PHONE = re.compile(r"(?:\+|%2[bB])\d(?:[ ().-]?\d){5,16}|(?<![\w.:/-])\d{11,15}(?![\w])")
_API_KEY = re.compile(r"\bsk_([A-Za-z0-9]+)_[A-Za-z0-9_-]+")
_WEBHOOK_SECRET = re.compile(r"\bwhsec_[A-Za-z0-9+/=_-]+")
_AUTH_HEADER = re.compile(r"\b(Bearer|Basic)\s+(?!sk_)[A-Za-z0-9._~+/=-]+")  # an API key keeps its prefix
_SQL_LITERAL = re.compile(r"'(?:[^']|'')*'")
# Settings whose values never appear in a log line (literal match; values shorter than 8 characters are
# not worth a false positive on every line): these, and each provider's secret settings
# (``ProviderSettings.secret_settings``, smsgw.config.providers).
SECRET_SETTINGS = ("SECRET_KEY",)
REDACTED = "[redacted]"


def _cut_db_detail(text: str) -> str:
    while True:
        found = _DB_DETAIL.search(text)
        if found is None:
            return text
        start = found.start()
        if found.group(1) == "\n":
            resume = _TRACEBACK_RESUMES.search(text, found.end())
            end = resume.start() if resume else len(text)
        else:  # an escaped \n inside a repr(): the detail runs to the end of the real line
            newline = text.find("\n", found.end())
            end = newline if newline >= 0 else len(text)
        text = text[:start] + f" [database detail {REDACTED}]" + text[end:]


def _mask_phone(match: re.Match) -> str:
    digits = re.sub(r"\D", "", match.group().replace("%2B", "").replace("%2b", ""))
    return "+***" + digits[-2:]


def _configured_secrets() -> list[str]:
    try:
        from django.conf import settings

        if not settings.configured:
            return []
        names = SECRET_SETTINGS + provider_declarations.secret_settings()
        values = [getattr(settings, name, "") for name in names]
    except Exception:  # logging must never fail because settings are half-loaded
        return []
    return [v for v in values if isinstance(v, str) and len(v) >= 8]


def redact(text: str) -> str:
    """``text`` without database error detail, phone numbers, API keys, webhook or configured secrets."""
    if not text:
        return text
    text = _cut_db_detail(text)
    text = _DB_QUOTED.sub(r'\1"…"', text)
    for secret in _configured_secrets():
        text = text.replace(secret, REDACTED)
    text = _API_KEY.sub(r"sk_\1_" + REDACTED, text)
    text = _WEBHOOK_SECRET.sub("whsec_" + REDACTED, text)
    text = _AUTH_HEADER.sub(r"\1 " + REDACTED, text)
    for pattern, replacement in provider_declarations.redact_patterns():  # what a provider package adds
        text = pattern.sub(replacement, text)
    return _PHONE.sub(_mask_phone, text)


_plain = logging.Formatter()


def _statement(record: logging.LogRecord) -> str:
    """A statement logged by django.db.backends (``(duration) sql; args=params; alias=alias``, the SQL with
    its parameters interpolated): the literals and the parameters go."""
    args = record.args if isinstance(record.args, tuple) else ()
    if hasattr(record, "params"):
        record.params = REDACTED
    if hasattr(record, "sql"):
        record.sql = _SQL_LITERAL.sub("'…'", str(record.sql))
    if len(args) == 4:
        duration, sql, _params, alias = args
        sql = _SQL_LITERAL.sub("'…'", str(sql))
        return f"({duration:.3f}) {sql}; args={REDACTED}; alias={alias}"
    return _SQL_LITERAL.sub("'…'", str(record.msg))


class Redact(logging.Filter):
    """Rewrites each record before any formatter sees it: its message (with its arguments merged in), the
    formatted exception (``exc_text``, which every formatter prints instead of formatting ``exc_info``
    again; ``exc_info`` is dropped so no later handler formats the raw one) and the stack. Statements
    logged by ``django.db.backends`` (settings.DEBUG) lose their literals and parameters."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("django.db.backends"):
            message = _statement(record)
        else:
            try:
                message = record.getMessage()
            except Exception:  # a bad format string: keep the template only
                message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = _plain.formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
