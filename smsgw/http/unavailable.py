"""The database does not answer: the web process says so (503 with Retry-After), once in its log.

A request that needs the database while it is unreachable (the API key lookup is the first query of every
authenticated call) is answered ``503 database_unavailable`` with ``Retry-After``, in the error envelope,
and nothing of it is stored: each write runs in a transaction that either commits or is rolled back.
Before, it was a 500 with a traceback at ERROR for every request (django.request logs every uncaught
exception), so an outage of a few seconds buried the log; now one WARNING line per process per
SMSGW_LOG_REPEAT_WINDOW (smsgw.runtime.logs.RepeatLimit counts the rest).

Two doors lead here. DRF views (the tenant API: authentication, the rate limiter's database bucket, the
view itself) go through ``smsgw.http.errors.api_exception_handler``, which answers ``DatabaseUnavailable`` in
place of the database error. Everything else (plain views such as /inbound/ and /metrics, the admin,
middleware) ends in Django's ``handler500`` (config.urls): ``convert_exception_to_response`` wraps every
middleware and the view, and turns an exception into ``handle_uncaught_exception``, which calls it with
the exception still being handled (django/core/handlers/exception.py). Provider status callbacks do not
come here: they are spooled to disk and answered as stored (receipts.spool).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import TypeGuard

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.views import defaults

from smsgw.domain_errors import DatabaseUnavailable

log = logging.getLogger(__name__)

# Lost or refused connections, timeouts, a server shutting down or out of connections: PEP 249's
# OperationalError ("not necessarily under the control of the programmer") and InterfaceError (psycopg: a
# connection already closed). A constraint or data error (IntegrityError, DataError) is the request's own
# fault and never lands here.
DB_UNAVAILABLE = (OperationalError, InterfaceError)


def retry_after_seconds() -> int:
    return int(settings.DB_RETRY_AFTER_SECONDS)


def is_unavailable(exc: BaseException | None) -> TypeGuard[BaseException]:
    return isinstance(exc, DB_UNAVAILABLE)


def database_unavailable() -> DatabaseUnavailable:
    seconds = retry_after_seconds()
    return DatabaseUnavailable(_message(seconds), retry_after=seconds, extra={"retry_after": seconds})


def _message(seconds: int) -> str:
    return f"The database is unavailable; retry in {seconds} s."


def connection_drop() -> None:
    """Close a connection the database dropped, so the next use connects afresh instead of failing on
    it (outside a transaction only: one we are inside of is its owner's to end)."""
    if not connection.in_atomic_block:
        with contextlib.suppress(Exception):
            connection.close()


def unavailable_noted(request: HttpRequest, exc: BaseException, response: HttpResponse) -> HttpResponse:
    """The one log line (rate-limited by smsgw.runtime.logs.RepeatLimit: its template never varies), and the
    response marked as logged so django.request does not add its own ERROR line for the 503."""
    log.warning(
        "database unavailable (%s): answering 503 with Retry-After %d s",
        type(exc).__name__,
        retry_after_seconds(),
    )
    connection_drop()
    # django.utils.log.log_response skips a response marked so; a private flag the stubs do not declare.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def unavailable_response(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """The 503 for a request outside DRF: the error envelope on the API's paths, plain text elsewhere."""
    from smsgw.http.boundary import envelope, is_api_path

    seconds = retry_after_seconds()
    message = _message(seconds)
    if is_api_path(request.path_info):
        code = DatabaseUnavailable.code
        response: HttpResponse = envelope(503, message, code=code, extra={"retry_after": seconds})
    else:
        response = HttpResponse(message + "\n", status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(seconds)
    return unavailable_noted(request, exc, response)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: a database that does not answer is a 503, anything else Django's own 500."""
    exc = sys.exc_info()[1]
    if is_unavailable(exc):
        return unavailable_response(request, exc)
    return defaults.server_error(request)
