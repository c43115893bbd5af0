"""The sandbox's JSON response, for the control API and every provider's JSON answers. Must not import
Django.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

_JSON = "application/json"


def _json(data: Any, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type=_JSON, headers=headers)
