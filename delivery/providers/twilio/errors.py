"""Twilio's error codes, classified once for the whole gateway (submission answers and status callbacks).

Twilio's own words are the source of each row: https://www.twilio.com/docs/api/errors/<code>. Twilio warns
that the code returned for a cause may change ("Users should not use the `error_code` and
`error_message` fields programmatically", twilio-oai spec/json/twilio_api_v2010.json, message
`error_code`), so every lookup has a safe default: by HTTP status at submission, and "permanent" (the
message ends failed and can be replayed by an operator, never resent blindly) for an unknown code in a
callback.

The class says what to do with the message; whether Twilio may already hold it is a separate question,
answered by ``submission_outcome`` from the HTTP status (docs/twilio.md, "Twilio's errors, classified
once").
"""

from __future__ import annotations

from delivery.providers.base import ErrorClass, ErrorInfo, Outcome, Scope

C = ErrorClass

TABLE: dict[str, ErrorInfo] = {
    # "Other POST requests - sending an SMS ... are not idempotent. If you get a 500 Server Error on these
    # requests, and you retry the request, it is possible for a customer to receive multiple messages"
    # (https://www.twilio.com/docs/api/errors/20500): retried only after reconciliation finds it absent.
    "20500": ErrorInfo(C.TRANSIENT, "Twilio internal server error"),
    # "The requested Twilio Service is temporarily unavailable ... Try again a few times with exponential
    # back-off" (https://www.twilio.com/docs/api/errors/20503), with no word on whether the request was
    # processed: like 20500, retried only after reconciliation finds it absent.
    "20503": ErrorInfo(C.TRANSIENT, "Twilio service unavailable"),
    # 401: "wrong combination of Account SID and Auth Token", a deleted token or key, or an account
    # suspended or closed. Every message would fail the same way: hold the account, never the messages.
    "20003": ErrorInfo(C.ACCOUNT_FAULT, "authentication failed (Auth Token or API key)", Scope.ACCOUNT),
    # "Requests that receive 429 responses aren't processed and are safe to retry after backing off."
    "20429": ErrorInfo(C.THROTTLED, "too many concurrent requests", Scope.ACCOUNT),
    # At submission: "sending the request to the wrong host or base URL", a wrong path or Account SID
    # (https://www.twilio.com/docs/api/errors/20404). The Messages resource always exists for a right
    # account and URL: every message would fail the same way, so the account is held.
    "20404": ErrorInfo(C.ACCOUNT_FAULT, "resource not found (Account SID or base URL)", Scope.ACCOUNT),
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
    # Split out of 21606 in July 2024 ("Sending a message from a non-Twilio number / from a number not
    # associated with your account / from a non-SMS capable number",
    # https://www.twilio.com/en-us/changelog/updates-to-the-error-code-dictionary-to-clarify-number-validatio):
    # "'From' is not a Twilio phone number or Short Code country mismatch"
    # (https://twilio.com/docs/api/errors/21659),
    "21659": ErrorInfo(C.ACCOUNT_FAULT, "'From' is not a Twilio number (or wrong country)", Scope.SENDER),
    # "The From number you are using to send an SMS is not associated with your account"
    # (https://twilio.com/docs/api/errors/21660),
    "21660": ErrorInfo(C.ACCOUNT_FAULT, "'From' belongs to another account", Scope.SENDER),
    # "The number you are using is not capable of sending messages" (https://twilio.com/docs/api/errors/21661).
    "21661": ErrorInfo(C.ACCOUNT_FAULT, "'From' is not SMS-capable", Scope.SENDER),
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
    # "The MessagingServiceSid provided with the request does not match a valid Sid pattern"
    # (https://www.twilio.com/docs/api/errors/21705): our configuration, the same for every message.
    "21705": ErrorInfo(C.ACCOUNT_FAULT, "invalid Messaging Service", Scope.SENDER),
    # "a limit of 30 outbound replies between two phone numbers in a 30-second period ... Twilio will set
    # any further messages in the loop to 'failed' status for 30 seconds" (uncharged;
    # https://www.twilio.com/docs/errors/14107): this pair only, so no scope's rate is lowered.
    "14107": ErrorInfo(C.THROTTLED, "SMS send rate limit between two numbers exceeded"),
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
    # "rejected by the downstream carriers for exceeding the rate limits allowed by your campaign ...
    # Slow down your rate of message sending" (https://twilio.com/docs/api/errors/30022).
    "30022": ErrorInfo(C.THROTTLED, "US A2P 10DLC: campaign rate limit exceeded", Scope.SENDER),
    # "US A2P 10DLC - Daily Message Cap Reached": T-Mobile's daily limit per A2P brand, shared by its
    # campaigns, until the next day (https://www.twilio.com/docs/api/errors/30023;
    # https://support.twilio.com/hc/en-us/articles/1260804800549). Wait; only this sender's rate is
    # lowered, as senders of other kinds (toll-free, short code) are not capped.
    "30023": ErrorInfo(C.THROTTLED, "US A2P 10DLC: daily message cap reached", Scope.SENDER),
    "30032": ErrorInfo(C.ACCOUNT_FAULT, "toll-free number not verified", Scope.SENDER),
    # US A2P 10DLC: messages from a number not registered to a campaign are blocked.
    "30034": ErrorInfo(C.ACCOUNT_FAULT, "US A2P 10DLC: sender not registered", Scope.SENDER),
    # "When the time elapsed since the message was submitted exceeds ValidityPeriod, Twilio does not send
    # the message." Our validity is the same clock, so the retry policy ends it (validity passed).
    "30036": ErrorInfo(C.TRANSIENT, "validity period expired at the provider"),
    # "more than 2000 messages per second" across the account and its subaccounts.
    "63017": ErrorInfo(C.THROTTLED, "account message rate exceeded", Scope.ACCOUNT),
    # "Twilio's platform encountered an internal error while processing this message ... Try sending the
    # message again" (https://www.twilio.com/docs/api/errors/30500).
    "30500": ErrorInfo(C.TRANSIENT, "Twilio internal error while processing the message"),
    # "exceeds the maximum number of messages permitted within a rolling 24 hour window ... Wait until the
    # next day for the 24 hour window to reset" (https://www.twilio.com/docs/api/errors/63038).
    "63038": ErrorInfo(C.THROTTLED, "account daily message limit (rolling 24 h)", Scope.ACCOUNT),
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
    if http_status == 404:  # a wrong base URL or Account SID, as 20404 above
        return ErrorInfo(C.ACCOUNT_FAULT, "HTTP 404 from the provider", Scope.ACCOUNT)
    if http_status == 408 or http_status >= 500:
        return ErrorInfo(C.TRANSIENT, f"HTTP {http_status} from the provider")
    return ErrorInfo(C.PERMANENT, f"HTTP {http_status} from the provider")


def submission_outcome(http_status: int, info: ErrorInfo) -> Outcome:
    """What an error answer to a message creation says about the message: TRANSIENT (Twilio did not take
    it: safe to send again) only where Twilio documents that it did not process the request; otherwise,
    if it may hold the message, UNCERTAIN (looked up before any resend, delivery.sending.reconcile).

    * 429: "An API Request that receives an error 429 response is never processed and is always safe to
      retry" (https://www.twilio.com/docs/errors/20429).
    * 4xx: a refused creation; Twilio's API "returns a HTTP status code 400 and includes a specific 5-digit
      Twilio error code" for a message it did not create
      (https://support.twilio.com/hc/en-us/articles/21923437804315). Its class decides: a code a resend
      may get past (21611, 30008, ...) is TRANSIENT, anything else REJECTED.
    * 5xx, 408 and anything else (a 2xx we could not read, a 3xx): no such guarantee. For a 500 Twilio
      warns that retrying a message creation "it is possible for a customer to receive multiple
      messages" (https://www.twilio.com/docs/api/errors/20500); a 503 or a 502/504 from a gateway may
      come after the request was forwarded and stored. UNCERTAIN, whatever the code says.
    """
    if http_status == 429:
        return Outcome.TRANSIENT
    if 400 <= http_status < 500 and http_status != 408:
        if info.error_class in (C.THROTTLED, C.TRANSIENT):
            return Outcome.TRANSIENT
        return Outcome.REJECTED
    return Outcome.UNCERTAIN
