"""Twilio's error codes, classified once for the whole gateway (submission answers and status callbacks).

Twilio's own words are the source of each row: https://www.twilio.com/docs/api/errors/<code>. Twilio warns
that the code returned for a cause may change ("Users should not use the `error_code` and
`error_message` fields programmatically", twilio-oai spec/json/twilio_api_v2010.json, message
`error_code`), so every lookup has a safe default: by HTTP status at submission, and "permanent" (the
message ends failed and can be replayed by an operator, never resent blindly) for an unknown code in a
callback.
"""

from __future__ import annotations

from delivery.providers.base import ErrorClass, ErrorInfo, Scope

C = ErrorClass

TABLE: dict[str, ErrorInfo] = {
    # 401: "wrong combination of Account SID and Auth Token", a deleted token or key, or an account
    # suspended or closed. Every message would fail the same way: hold the account, never the messages.
    "20003": ErrorInfo(C.ACCOUNT_FAULT, "authentication failed (Auth Token or API key)", Scope.ACCOUNT),
    # "Requests that receive 429 responses aren't processed and are safe to retry after backing off."
    "20429": ErrorInfo(C.THROTTLED, "too many concurrent requests", Scope.ACCOUNT),
    "21211": ErrorInfo(C.PERMANENT, "invalid 'To' phone number"),
    # A Voice error ("outbound phone call to an invalid phone number"), seen on messaging too.
    "21217": ErrorInfo(C.PERMANENT, "phone number does not appear to be valid"),
    # "permissions disabled for the destination region": fixed in the Console's Geo Permissions.
    "21408": ErrorInfo(
        C.ACCOUNT_FAULT, "geo permission disabled for the destination region", Scope.DESTINATION
    ),
    # "The 'From' phone number provided is not a valid message-capable Twilio phone number for this
    # destination/account".
    "21606": ErrorInfo(
        C.ACCOUNT_FAULT, "'From' is not a message-capable number of this account", Scope.SENDER
    ),
    # Trial accounts may only send to verified numbers: this recipient, not the account.
    "21608": ErrorInfo(C.PERMANENT, "trial account: 'To' number not verified"),
    # "a 'To' number that has replied with STOP ... until the subscriber ... has responded with START".
    "21610": ErrorInfo(C.OPTED_OUT, "recipient unsubscribed (replied STOP)"),
    # "When a queue for a particular 'From' number exceeds 10 hours, this error will be thrown when
    # attempting to create additional messages" - the sender is full, not the message wrong: wait.
    "21611": ErrorInfo(C.THROTTLED, "sender queue full (more than 10 h of messages queued)", Scope.SENDER),
    "21612": ErrorInfo(C.PERMANENT, "this 'To'/'From' combination cannot be sent"),
    "21614": ErrorInfo(C.PERMANENT, "'To' is not a valid mobile number"),
    "21617": ErrorInfo(C.PERMANENT, "body exceeds 1,600 characters"),
    # Queue overflow: "Try sending your message again after waiting for some time."
    "30001": ErrorInfo(C.THROTTLED, "queue overflow", Scope.SENDER),
    # "your account was suspended before Twilio could send it".
    "30002": ErrorInfo(C.ACCOUNT_FAULT, "account suspended", Scope.ACCOUNT),
    # Undelivered at the handset. Twilio suggests retrying 30003, but after a carrier receipt a resend may
    # reach the handset twice; the message ends `undelivered` and the tenant decides.
    "30003": ErrorInfo(C.PERMANENT, "unreachable destination handset"),
    "30004": ErrorInfo(C.PERMANENT, "message blocked"),
    "30005": ErrorInfo(C.PERMANENT, "unknown destination handset"),
    "30006": ErrorInfo(C.PERMANENT, "landline or unreachable carrier"),
    "30007": ErrorInfo(C.PERMANENT, "message filtered by the carrier"),
    # Unknown error: retry (only ever acted on for `failed`, which means Twilio never handed it on).
    "30008": ErrorInfo(C.TRANSIENT, "unknown error"),
    "30032": ErrorInfo(C.ACCOUNT_FAULT, "toll-free number not verified", Scope.SENDER),
    # US A2P 10DLC: messages from a number not registered to a campaign are blocked.
    "30034": ErrorInfo(C.ACCOUNT_FAULT, "US A2P 10DLC: sender not registered", Scope.SENDER),
    # "When the time elapsed since the message was submitted exceeds ValidityPeriod, Twilio does not send
    # the message." Our validity is the same clock, so the retry policy ends it (validity passed).
    "30036": ErrorInfo(C.TRANSIENT, "validity period expired at the provider"),
    # "more than 2000 messages per second" across the account and its subaccounts.
    "63017": ErrorInfo(C.THROTTLED, "account message rate exceeded", Scope.ACCOUNT),
}

UNKNOWN_IN_CALLBACK = ErrorInfo(C.PERMANENT, "unknown provider error")


def classify(error_code: str, http_status: int | None = None) -> ErrorInfo:
    """The table row for ``error_code``; without a known code, a default by HTTP status (a submission
    answer) or "permanent" (a callback, ``http_status`` None)."""
    row = TABLE.get((error_code or "").strip())
    if row is not None:
        return row
    if http_status is None:
        return UNKNOWN_IN_CALLBACK
    if http_status == 429:
        return ErrorInfo(C.THROTTLED, "too many requests", Scope.ACCOUNT)
    if http_status in (401, 403):
        return ErrorInfo(C.ACCOUNT_FAULT, f"HTTP {http_status} from the provider", Scope.ACCOUNT)
    if http_status == 408 or http_status >= 500:
        return ErrorInfo(C.TRANSIENT, f"HTTP {http_status} from the provider")
    return ErrorInfo(C.PERMANENT, f"HTTP {http_status} from the provider")
