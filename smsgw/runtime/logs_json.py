"""Structured log lines (SMSGW_LOG_FORMAT=json, the default in production): one JSON object per line,
for a log pipeline to index by field instead of parsing text.

Each line carries only these fields: time, level, logger, message, exc_info/stack_info when present,
process, and the context where it exists: ``request_id`` (the web request being answered, the
``Request-Id`` header of its response: smsgw.http.request_id), ``task_id`` and ``task_name`` (the Celery
task running), ``tenant`` (the tenant slug of the API key that authenticated the request), ``message_id``
/ ``message_ids`` (public ids, passed by the code that logs about a message with ``extra=``), ``campaign``
and ``actor`` (a campaign's public id and who paused, resumed or cancelled it, passed with ``extra=`` by
scheduling.campaigns.control: only from the record, never from the context),
``trace_id`` and ``span_id`` (the current span's, when tracing is on: smsgw.tracing; or a message's,
passed likewise). Anything else a library attaches to a record (Django's ``request`` object with its
query string, ``extra`` dicts) is left out: a field not listed here could carry a number or a body. The
message itself has already been through smsgw.runtime.logs.Redact (the handler's filter chain keeps it,
last), and context values are redacted again here. The plain format (``PlainFormatter``) ends a line
written while a request is being answered with `` request_id=<id>``, and one written in a span with
`` trace_id=<id>``.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from smsgw.runtime.logs import redact

CONTEXT_FIELDS = ("task_id", "task_name", "tenant", "message_id", "message_ids", "trace_id")
# Passed by the code that logs with ``extra=`` only (no context sets them): an operator's act on a campaign.
RECORD_FIELDS = ("campaign", "actor")
FIELDS = frozenset(
    {
        "time",
        "level",
        "logger",
        "message",
        "exc_info",
        "stack_info",
        "process",
        "request_id",
        "span_id",
        *CONTEXT_FIELDS,
        *RECORD_FIELDS,
    }
)
MAX_IDS = 20  # a batch's ids are listed up to this many

_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("smsgw_log", default=None)


def context_set(**fields: str) -> None:
    """Add fields to every line this request (or thread) writes until ``context_clear``."""
    _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if k in CONTEXT_FIELDS}})


def context_clear() -> None:
    _context.set(None)


# Apart from the context above: LogContextMiddleware, deep in the chain, clears that one as the request
# enters it, and the id is set before (smsgw.http.request_id.RequestIdMiddleware, first in the chain).
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("smsgw_request_id", default=None)


def request_id_set(value: str | None) -> None:
    _request_id.set(value)


def request_id() -> str | None:
    """The id of the request this thread is answering (its ``Request-Id``), or None outside one."""
    return _request_id.get()


def trace_ids() -> tuple[str, str]:
    """The current span's trace and span ids (smsgw.tracing), or blanks outside a span (and always when
    tracing is off): a line written while a message is accepted carries the message's trace id, one
    written in a send or receipt batch the batch's, whose span links to each message's trace. A caller
    that logs about one message in a batch passes its trace id (``extra={"trace_id": ...}``)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return "", ""
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def _current_task():
    try:
        from celery import current_task

        # current_task is a celery.local.Proxy; the stubs type it as the Task it stands for.
        task = current_task._get_current_object()  # type: ignore[attr-defined]
    except Exception:  # no Celery, or outside a task
        return None
    return task if task is not None and getattr(task, "request", None) is not None else None


class JsonFormatter(_JsonFormatter):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("timestamp", False)
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(process)d",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            datefmt="%Y-%m-%dT%H:%M:%S%z",
            **kwargs,
        )

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict) -> None:
        # format() put the exception and stack here; a dict logged as the message is not spread into fields.
        kept = {k: v for k, v in message_dict.items() if k in ("exc_info", "stack_info")}
        super().add_fields(log_data, record, kept)
        for key in [k for k in log_data if k not in FIELDS]:
            del log_data[key]
        context = _context.get() or {}
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None) or context.get(key)
            if value:
                log_data[key] = value
        for key in RECORD_FIELDS:
            value = getattr(record, key, None)
            if value:
                log_data[key] = redact(str(value))
        if _request_id.get():  # checked for its character set when set: nothing to redact
            log_data["request_id"] = _request_id.get()
        trace_id, span_id = trace_ids()
        if trace_id and "trace_id" not in log_data:
            log_data["trace_id"], log_data["span_id"] = trace_id, span_id
        task = _current_task()
        if task is not None and task.request.id and "task_id" not in log_data:
            log_data["task_id"], log_data["task_name"] = task.request.id, task.name
        for key in CONTEXT_FIELDS:
            value = log_data.get(key)
            if isinstance(value, (list, tuple)):
                log_data[key] = [redact(str(v)) for v in value[:MAX_IDS]]
            elif value is not None:
                log_data[key] = redact(str(value))


def handlers_format(logger: logging.Logger | None = None) -> None:
    """Celery replaces the root logger's handlers with its own (worker_hijack_root_logger): give them the
    JSON formatter too when SMSGW_LOG_FORMAT=json."""
    from django.conf import settings

    if getattr(settings, "LOG_FORMAT", "plain") != "json":
        return
    for handler in (logger or logging.getLogger()).handlers:
        if not isinstance(handler.formatter, JsonFormatter):
            handler.setFormatter(JsonFormatter())


class PlainFormatter(logging.Formatter):
    """The plain format (SMSGW_LOG_FORMAT=plain); a line written while a request is answered ends with its
    ``request_id=``, so that a client's ``Request-Id`` finds every line of its request."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        current = _request_id.get()
        trace_id = getattr(record, "trace_id", None) or trace_ids()[0]
        if not current and not trace_id:
            return line
        tail = (f" request_id={current}" if current else "") + (f" trace_id={trace_id}" if trace_id else "")
        head, newline, rest = line.partition("\n")  # after the message, before a traceback
        return f"{head}{tail}{newline}{rest}"


def _request_finished(**_kwargs) -> None:
    context_clear()
    request_id_set(None)


class LogContextMiddleware:
    """A fresh log context per request: gthread workers reuse threads, and a context variable set while
    one request ran would otherwise label the next request's lines with its tenant. Cleared when the
    request starts and when its response is closed (request_finished), not when the middleware returns:
    Django logs a 4xx/5xx (django.request) after the middleware chain, and that line belongs to it."""

    def __init__(self, get_response):
        from django.core.signals import request_finished

        self.get_response = get_response
        request_finished.connect(_request_finished, dispatch_uid="smsgw.runtime.logs_json.context")

    def __call__(self, request):
        context_clear()
        return self.get_response(request)
