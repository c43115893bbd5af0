"""Vonage's capabilities and settings (``VONAGE_*``), read from the environment by ``config.settings``
through the provider registry (``delivery.providers.declare_all``). Imports neither Django's settings
nor the SDK.

Sources (developer.vonage.com, checked 2026-12):

* ``ttl``: "The duration in milliseconds the delivery of an SMS will be attempted ... By default Vonage
  attempts delivery for 72 hours", accepted from 20000 to 604800000 ms (developer.vonage.com/en/api/sms,
  "Send an SMS", ``ttl``; the SDK's ``SmsMessage.ttl`` has the same bounds). Our validity periods are
  seconds: 20 s to 7 days.
* ``client-ref`` and ``callback`` are at most 100 characters (developer.vonage.com/en/api/sms; the SDK's
  ``SmsMessage``).
* ``text``: Vonage concatenates a long text itself and answers one ``message-id`` per part
  (developer.vonage.com/messaging/sms/guides/concatenation-and-encoding); the sandbox refuses more than
  3200 characters (status 3), which is what we declare.
* Signatures: "MD5 hash" (the default) or MD5, SHA1, SHA-256 and SHA-512 HMAC, chosen in the dashboard
  (developer.vonage.com/getting-started/concepts/signing-messages). Signing is what lets a receiver
  "verify that a request originates from a trusted source ... [and] defend against interception and
  later replay" (same page): the SMS API's receipts and inbound messages carry ``sig``, ``timestamp``
  (unix seconds) and ``nonce`` once the account has a signature secret. Without one, anyone who can
  reach ``/receipts/vonage/`` or ``/inbound/vonage/`` could forge a receipt or a STOP, so production
  refuses to start without ``VONAGE_SIGNATURE_SECRET`` when a route reaches Vonage.
"""

from __future__ import annotations

import math

from smsgw.config.env import env_choice, env_float, env_int, env_secret, env_str
from smsgw.config.providers import Capabilities, ProviderSettings, ValidityBounds
from smsgw.config.security import placeholder_problem

# ttl: 20000..604800000 milliseconds (developer.vonage.com/en/api/sms, ``ttl``), in seconds.
VALIDITY = ValidityBounds(minimum=20, maximum=604800)
MAX_REF_CHARS = 100  # client-ref and callback (developer.vonage.com/en/api/sms)
SIGNATURE_METHODS = ("md5hash", "md5", "sha1", "sha256", "sha512")
# A signed callback whose ``timestamp`` is further than this from our clock (either way) is refused, and
# every signature taken is remembered this long again (receipts.replay), so a captured callback cannot be
# posted a second time, inside the window or after it. Five minutes: the usual bound for signed
# webhooks, wide enough for clock skew and Vonage's queueing. Vonage documents ``timestamp`` as the time
# it started to push the callback, so a retry after a longer outage of ours may carry the old time: a
# deployment that must take those raises it (up to a day, Vonage's own retry span for inbound messages).
SIGNATURE_MAX_AGE_SECONDS = 300
# The sandbox's credentials (delivery/providers/vonage/sandbox, the defaults outside production;
# docs/vonage.md): public.
SANDBOX_API_KEY = "abcd1234"
SANDBOX_API_SECRET = "sandbox-api-secret"

CAPABILITIES = Capabilities(
    lookup_by_recipient=False,  # the SMS API has no message list (only the Reports API, not used)
    fetch_by_id=False,  # and no fetch: a message's state arrives only in its delivery receipts
    validity_period=VALIDITY,
    per_part_ids=True,  # one message-id per part, one receipt per part
    sender_pools=None,  # a ``from`` is always given
    max_body_chars=3200,
    signature_schemes=("md5hash", "hmac-md5", "hmac-sha1", "hmac-sha256", "hmac-sha512"),
    # The account's receipt webhook method: POST-JSON or POST (a form, urlencoded; multipart carries the
    # same fields); GET sends no body (delivery.providers.vonage.callbacks).
    callback_content_types=("application/json", "application/x-www-form-urlencoded", "multipart/form-data"),
    transport="request",
    inbound=True,  # the account's (or number's) inbound SMS webhook
)


def credentials_problem(api_key: str, api_secret: str, signature_secret: str, method: str) -> str | None:
    """Why the Vonage provider cannot run in production with these credentials, or None (fatal when a
    route reaches Vonage: ``SMSGW_PROVIDER`` or a leg of ``SMSGW_ROUTES``). Requests are signed only
    with an HMAC method (the SDK offers no "md5hash" signing): with md5hash they authenticate with the
    api_secret. The signature secret is required: it is the only proof a receipt or an inbound STOP
    came from Vonage."""
    reached = "when vonage is reached (SMSGW_PROVIDER or SMSGW_ROUTES)"
    if not api_key:
        return f"VONAGE_API_KEY must be set {reached}"
    if not api_secret and not (signature_secret and method != "md5hash"):
        return (
            f"VONAGE_API_SECRET must be set {reached} "
            "(or VONAGE_SIGNATURE_SECRET with an HMAC VONAGE_SIGNATURE_METHOD)"
        )
    if not signature_secret:
        return (
            f"VONAGE_SIGNATURE_SECRET must be set {reached}: receipts and inbound messages (STOP) are "
            "verified with it (the account's signature secret, Vonage dashboard, API settings)"
        )
    return (
        placeholder_problem("VONAGE_API_KEY", api_key, (SANDBOX_API_KEY,))
        or (
            placeholder_problem("VONAGE_API_SECRET", api_secret, (SANDBOX_API_SECRET,))
            if api_secret
            else None
        )
        or placeholder_problem("VONAGE_SIGNATURE_SECRET", signature_secret)
    )


def load_settings(production: bool) -> ProviderSettings:
    """The ``VONAGE_*`` settings. Outside production the credentials default to the sandbox's
    (``delivery/providers/vonage/sandbox``); the REST host is Vonage's own unless ``VONAGE_REST_HOST`` says
    otherwise."""
    # The account's API key and secret (Vonage API Dashboard, "API settings").
    api_key = env_str("VONAGE_API_KEY", "" if production else SANDBOX_API_KEY)
    # The API secret (without a signature secret of an HMAC method, requests authenticate with it).
    # Vonage keeps up to two API secrets per key, so a rotation is: make the second, set it here, restart,
    # revoke the first (developer.vonage.com/en/account/secret-management; docs/security.md).
    api_secret = env_secret("VONAGE_API_SECRET", "" if production else SANDBOX_API_SECRET)
    # The signature secret and its method, as set in the dashboard's "API settings" (Signed webhooks): with
    # them delivery receipts and inbound messages are verified; production requires them.
    signature_secret = env_secret("VONAGE_SIGNATURE_SECRET", "")
    # During a signature-secret rotation only: the secret being replaced. The dashboard holds one
    # signature secret and signs with the new one from the moment it is saved, while callbacks already
    # queued carry the old one: both verify them while this is set, and submissions authenticate with
    # VONAGE_API_SECRET (when set) instead of a signature, which the swap would break on one side or the
    # other (docs/security.md, "Rotating a provider's credentials"). Unset it once the swap is done.
    signature_secret_previous = env_secret("VONAGE_SIGNATURE_SECRET_PREVIOUS", "")
    # The method: md5hash (the dashboard's default) or an HMAC (md5, sha1, sha256, sha512), which also
    # signs the submissions.
    method = env_choice("VONAGE_SIGNATURE_METHOD", "md5hash", SIGNATURE_METHODS)
    # A request to Vonage not answered within this many seconds is given up (an uncertain submission).
    # Whole seconds: the SDK's HttpClientOptions.timeout is an int (rounded up here, so the request
    # timeout the core plans with is the one the requests really get).
    timeout = float(math.ceil(env_float("VONAGE_TIMEOUT_SECONDS", 10.0, minimum=0.1)))
    values = {
        "VONAGE_API_KEY": api_key,
        "VONAGE_API_SECRET": api_secret,
        # Given, submissions are signed with it (no api_secret is sent) and every delivery receipt must
        # carry a valid ``sig``; its method is the one chosen in Vonage's dashboard.
        "VONAGE_SIGNATURE_SECRET": signature_secret,
        "VONAGE_SIGNATURE_SECRET_PREVIOUS": signature_secret_previous,
        "VONAGE_SIGNATURE_METHOD": method,
        # Signed callbacks older or newer than this are refused (replays: receipts.replay).
        "VONAGE_SIGNATURE_MAX_AGE_SECONDS": env_int(
            "VONAGE_SIGNATURE_MAX_AGE_SECONDS", SIGNATURE_MAX_AGE_SECONDS, minimum=30
        ),
        # host[:port] without a scheme: the SDK builds https://{rest_host}/sms/json.
        "VONAGE_REST_HOST": env_str("VONAGE_REST_HOST", "rest.nexmo.com"),
        # A CA bundle to trust instead of the system's (the sandbox's throwaway CA); "" = the default.
        "VONAGE_CA_BUNDLE": env_str("VONAGE_CA_BUNDLE", ""),
        "VONAGE_TIMEOUT_SECONDS": timeout,
    }
    return ProviderSettings(
        values=values,
        # Outside production the sandbox's values are the defaults and receipts may come unsigned.
        problem=(
            credentials_problem(api_key, api_secret, signature_secret, method)
            or (
                placeholder_problem("VONAGE_SIGNATURE_SECRET_PREVIOUS", signature_secret_previous)
                if signature_secret_previous
                else None
            )
        )
        if production
        else None,
        request_timeout=timeout,
        request_timeout_setting="VONAGE_TIMEOUT_SECONDS",
        secret_settings=("VONAGE_API_SECRET", "VONAGE_SIGNATURE_SECRET", "VONAGE_SIGNATURE_SECRET_PREVIOUS"),
    )
