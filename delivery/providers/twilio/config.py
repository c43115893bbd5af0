"""Twilio's capabilities and settings (``TWILIO_*``), read from the environment by ``config.settings``
through the provider registry (``delivery.providers.declare_all``). Imports neither Django's settings
nor the SDK."""

from __future__ import annotations

import re

from smsgw.config.env import env_float, env_pairs, env_secret, env_str
from smsgw.config.providers import Capabilities, ProviderSettings, SenderPools, ValidityBounds
from smsgw.config.security import placeholder_problem

# ValidityPeriod: "Accepted values are integers from 1 to 36000" (twilio-oai, CreateMessageRequest).
VALIDITY = ValidityBounds(minimum=1, maximum=36000)
# A Messaging Service SID: "MG" and 32 hex digits (twilio-oai, api.v2010.account.message
# `messaging_service_sid`: pattern ^MG[0-9a-fA-F]{32}$).
MESSAGING_SERVICE_SID = r"MG[0-9a-fA-F]{32}"
# An Account SID is "AC" and 32 hex digits: twilio-oai, twilio_api_v2010.yaml, components
# api.v2010.account.message `account_sid`: pattern ^AC[0-9a-fA-F]{32}$.
ACCOUNT_SID_RE = re.compile(r"^AC[0-9a-fA-F]{32}$")
API_KEY_SID_RE = re.compile(r"^SK[0-9a-fA-F]{32}$")
# Concurrent REST API requests of one account. Past Twilio's limit a request is refused with 429/20429
# ("your account exceeds allowed concurrency to Twilio's REST API ... Requests that receive 429 responses
# aren't processed", twilio.com/docs/api/errors/20429), and each response carries a
# Twilio-Concurrent-Requests header. Twilio publishes no number: 100 per account is the commonly cited
# default, not a documented one; an account with another limit sets SMSGW_ACCOUNT_CONCURRENT_REQUESTS.
CONCURRENT_REQUESTS = 100

CAPABILITIES = Capabilities(
    lookup_by_recipient=True,  # GET /Messages?To=&From=&DateSent>=
    fetch_by_id=True,  # GET /Messages/{Sid}
    validity_period=VALIDITY,
    per_part_ids=False,  # one Message SID for all segments
    # "The text of the message you want to send. Can be up to 1,600 characters in length" (twilio-oai,
    # CreateMessageRequest `Body`).
    max_body_chars=1600,
    sender_pools=SenderPools(pattern=MESSAGING_SERVICE_SID, description="MG followed by 32 hex characters"),
    # X-Twilio-Signature with the Auth Token; SharedKey HMAC-SHA256 announced by
    # X-Twilio-Webhooks-Signature-Settings (callbacks.validate).
    signature_schemes=("hmac-sha1-auth-token", "hmac-sha256-shared-key"),
    signing_key_header="X-Twilio-Webhooks-Signature-Settings",
    signing_keys_setting="TWILIO_WEBHOOK_SHARED_KEYS",
    # Status callbacks and incoming-message webhooks are form posts (application/x-www-form-urlencoded):
    # X-Twilio-Signature is computed over the URL and the form's fields. A multipart form carries the same
    # fields (and is what test clients post); a JSON body to these endpoints is not Twilio's.
    callback_content_types=("application/x-www-form-urlencoded", "multipart/form-data"),
    transport="request",
    inbound=True,  # "A message comes in": the number's (or messaging service's) incoming-message webhook
)


# The sandbox's credentials (the defaults outside production; docs/twilio.md): public, so never a
# production account's.
SANDBOX_ACCOUNT_SID = "AC00000000000000000000000000000000"
SANDBOX_AUTH_TOKEN = "sandbox-auth-token"


def credentials_problem(
    account_sid: str, auth_token: str, api_key_secret: str = "", api_key_sid: str = ""
) -> str | None:
    """Why the Twilio provider cannot run with these credentials, or None (fatal in production when a
    route reaches Twilio: ``SMSGW_PROVIDER`` or a leg of ``SMSGW_ROUTES``). Without them every
    submission answers 401/20003 and every signed status callback fails validation (403). The Auth
    Token is also the key every X-Twilio-Signature is checked with, so an example's value would let
    anyone forge receipts and STOPs: it is refused like a missing one."""
    missing = [
        name
        for name, value in (("TWILIO_ACCOUNT_SID", account_sid), ("TWILIO_AUTH_TOKEN", auth_token))
        if not value
    ]
    if missing:
        return f"{' and '.join(missing)} must be set when twilio is reached (SMSGW_PROVIDER or SMSGW_ROUTES)"
    if not ACCOUNT_SID_RE.match(account_sid):
        return "TWILIO_ACCOUNT_SID must be 'AC' followed by 32 hexadecimal digits"
    if api_key_sid and not API_KEY_SID_RE.match(api_key_sid):
        return "TWILIO_API_KEY_SID must be 'SK' followed by 32 hexadecimal digits"
    return (
        placeholder_problem("TWILIO_ACCOUNT_SID", account_sid, (SANDBOX_ACCOUNT_SID,))
        or placeholder_problem("TWILIO_AUTH_TOKEN", auth_token, (SANDBOX_AUTH_TOKEN,))
        or (placeholder_problem("TWILIO_API_KEY_SECRET", api_key_secret) if api_key_secret else None)
    )


def load_settings(production: bool) -> ProviderSettings:
    """The ``TWILIO_*`` settings. Outside production the defaults are the sandbox's
    (deploy/run-embedded.sh starts it on :8081)."""
    # The account (AC + 32 hex digits) and its Auth Token (Twilio Console, Account info); the token also
    # verifies the status and inbound callbacks' X-Twilio-Signature, so it is needed with an API key too.
    account_sid = env_str("TWILIO_ACCOUNT_SID", "" if production else SANDBOX_ACCOUNT_SID)
    # The account's Auth Token: it signs the callbacks (X-Twilio-Signature), so it is needed with an API key
    # too.
    auth_token = env_secret("TWILIO_AUTH_TOKEN", "" if production else SANDBOX_AUTH_TOKEN)
    # During an Auth Token rotation only: the token being replaced (the primary, while TWILIO_AUTH_TOKEN
    # holds the new secondary one). Callbacks are signed with the primary until the secondary is promoted,
    # so both verify them; requests use TWILIO_AUTH_TOKEN only (docs/security.md, "Rotating a provider's
    # credentials"). Unset it once the new token is promoted.
    auth_token_previous = env_secret("TWILIO_AUTH_TOKEN_PREVIOUS", "")
    # The secret of the API key TWILIO_API_KEY_SID (shown once when the key is made).
    api_key_secret = env_secret("TWILIO_API_KEY_SECRET", "")
    # Optional API key (Twilio's recommended credentials for production, twilio.com/docs/iam/api-keys):
    # when set, requests authenticate with the key and its secret, and TWILIO_ACCOUNT_SID only names
    # the account.
    api_key_sid = env_str("TWILIO_API_KEY_SID", "")
    # A request to Twilio that has not answered within this many seconds is given up (an uncertain
    # submission, then looked up: docs/twilio.md).
    timeout = env_float("TWILIO_TIMEOUT_SECONDS", 10.0, minimum=0.1)
    values = {
        "TWILIO_ACCOUNT_SID": account_sid,
        "TWILIO_AUTH_TOKEN": auth_token,
        "TWILIO_AUTH_TOKEN_PREVIOUS": auth_token_previous,
        "TWILIO_API_KEY_SID": api_key_sid,
        "TWILIO_API_KEY_SECRET": api_key_secret,
        # The sandbox is reached exactly like Twilio, through this base URL (default: Twilio itself in
        # production).
        "TWILIO_API_BASE_URL": env_str(
            "TWILIO_API_BASE_URL", "https://api.twilio.com" if production else "http://127.0.0.1:8081"
        ),
        "TWILIO_TIMEOUT_SECONDS": timeout,
        # Webhook SharedKeys ("<key id>:<secret>,..."): callbacks announcing one of these keys in
        # X-Twilio-Webhooks-Signature-Settings are verified with it (HMAC-SHA256); others with the Auth
        # Token.
        "TWILIO_WEBHOOK_SHARED_KEYS": env_pairs("TWILIO_WEBHOOK_SHARED_KEYS", secret=True),
    }
    return ProviderSettings(
        values=values,
        # Outside production the sandbox's values are the defaults: only production refuses them.
        problem=(
            credentials_problem(account_sid, auth_token, api_key_secret, api_key_sid)
            or (
                placeholder_problem("TWILIO_AUTH_TOKEN_PREVIOUS", auth_token_previous, (SANDBOX_AUTH_TOKEN,))
                if auth_token_previous
                else None
            )
        )
        if production
        else None,
        request_timeout=timeout,
        request_timeout_setting="TWILIO_TIMEOUT_SECONDS",
        secret_settings=("TWILIO_AUTH_TOKEN", "TWILIO_AUTH_TOKEN_PREVIOUS", "TWILIO_API_KEY_SECRET"),
        concurrent_requests=CONCURRENT_REQUESTS,
    )
