"""The fake provider's capabilities and settings (``FAKEPROV_*``), and its wire format, which its adapter
and its sandbox share: a JSON API (``POST /v1/messages`` with a bearer token; ``GET /v1/messages/<id>``)
and form-encoded delivery receipts signed with HMAC-SHA256 over the callback URL and the sorted fields."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlencode

from smsgw.config.env import env_float, env_str
from smsgw.config.providers import Capabilities, ProviderSettings

NAME = "fakeprov"
SIGNATURE_HEADER = "X-Fakeprov-Signature"
FORM = "application/x-www-form-urlencoded"
DEFAULT_TOKEN = "fakeprov-sandbox-token"
DEFAULT_SECRET = "fakeprov-sandbox-secret"
# Its statuses, as a receipt or a look-up gives them -> RECEIPT_STATUSES.
STATUS_MAP = {"accepted": "queued", "sent": "sent", "delivered": "delivered", "failed": "failed"}

CAPABILITIES = Capabilities(
    fetch_by_id=True,
    max_body_chars=1600,
    signature_schemes=("hmac-sha256-url",),
    callback_content_types=(FORM,),
    transport="request",
    inbound=False,  # its receipts only: /inbound/fakeprov/ answers 404
)


def signature(secret: str, url: str, fields: dict[str, str]) -> str:
    message = url + "\n" + urlencode(sorted(fields.items()))
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def load_settings(production: bool) -> ProviderSettings:
    token = env_str("FAKEPROV_TOKEN", "" if production else DEFAULT_TOKEN)
    return ProviderSettings(
        values={
            "FAKEPROV_BASE_URL": env_str("FAKEPROV_BASE_URL", "http://127.0.0.1:8090"),
            "FAKEPROV_TOKEN": token,
            "FAKEPROV_SIGNING_SECRET": env_str(
                "FAKEPROV_SIGNING_SECRET", "" if production else DEFAULT_SECRET
            ),
            "FAKEPROV_TIMEOUT_SECONDS": env_float("FAKEPROV_TIMEOUT_SECONDS", 5.0, minimum=0.1),
        },
        problem=None if token else "FAKEPROV_TOKEN is not set",
        request_timeout=env_float("FAKEPROV_TIMEOUT_SECONDS", 5.0, minimum=0.1),
        request_timeout_setting="FAKEPROV_TIMEOUT_SECONDS",
        secret_settings=("FAKEPROV_TOKEN", "FAKEPROV_SIGNING_SECRET"),
    )
