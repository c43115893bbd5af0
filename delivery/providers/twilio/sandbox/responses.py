"""Twilio-shaped HTTP responses (the JSON response is the framework's, ``sandbox.responses``): Twilio's
error resource (``code``, ``message``, ``more_info``, ``status``), the 401/20003 answer and the
``Retry-After`` header. Must not import Django.
"""

from __future__ import annotations

from aiohttp import web

from delivery.providers.twilio.sandbox.config import MORE_INFO
from sandbox.responses import _json


def twilio_error(status: int, code: int, message: str, headers: dict | None = None) -> web.Response:
    return _json(
        {"code": code, "message": message, "more_info": f"{MORE_INFO}{code}", "status": status},
        status,
        headers,
    )


def _unauthorized() -> web.Response:
    # Twilio 20003 Permission Denied, HTTP 401 (twilio.com/docs/api/errors/20003)
    return _json(
        {
            "code": 20003,
            "detail": "Your AccountSid or AuthToken was incorrect.",
            "message": "Authenticate",
            "more_info": f"{MORE_INFO}20003",
            "status": 401,
        },
        401,
        {"WWW-Authenticate": 'Basic realm="Twilio API"'},
    )


def _retry_after_header(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)
