"""gunicorn's own error answers in the API's JSON envelope.

gunicorn refuses some requests before Django sees them (a request line over ``limit_request_line``, too
many or too large header fields, a malformed request line) and answers them with an HTML page of its own
(``gunicorn.util.write_error``). Every client of this server expects ``{"error": {"code", "message",
"fields"?}}`` (docs/api.md, "Errors"), so ``install`` replaces that writer, in the master before it forks
its workers (smsgw.runtime.gunicorn_conf). gunicorn's message is not repeated: it quotes the request line
or header it refused, which is hostile input. Imports nothing of Django: gunicorn loads it with its
configuration, before the application."""

from __future__ import annotations

import json

from gunicorn import util

# gunicorn's limit on the request line (method, URL, version), at its own maximum (smsgw.http.boundary's
# MAX_URL_BYTES keeps the API's limit under it, so that the 414 is Django's and names the URL).
LIMIT_REQUEST_LINE = 8190

_CODES = {
    400: "bad_request",
    403: "forbidden",
    414: "url_too_long",
    417: "expectation_failed",
    431: "headers_too_large",
    500: "server_error",
    501: "not_implemented",
}
_FIELDS = {
    414: {"url": [f"request lines are at most {LIMIT_REQUEST_LINE} bytes"]},
    431: {"headers": ["too many header fields, or one too large"]},
}


def error_response(status: int, reason: str) -> bytes:
    """The whole HTTP response gunicorn sends for a request it refused itself."""
    error: dict = {"code": _CODES.get(status, "error"), "message": f"{reason}."}
    if status in _FIELDS:
        error["fields"] = _FIELDS[status]
    body = json.dumps({"error": error}, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def write_error(sock, status_int: int, reason: str, mesg: str) -> None:
    """``gunicorn.util.write_error``'s signature; ``mesg`` (gunicorn's detail) is left out on purpose."""
    util.write_nonblock(sock, error_response(status_int, reason))


def install() -> None:
    # The one place gunicorn writes its own error pages (gunicorn.workers.base.Worker.handle_error calls
    # util.write_error through the module, so replacing the attribute reaches every worker class).
    util.write_error = write_error
