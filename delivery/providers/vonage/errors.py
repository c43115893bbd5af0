"""Vonage's SMS API codes, classified once for the whole gateway: the ``status`` of each entry of a
``POST /sms/json`` answer (submission) and the ``err-code`` of a delivery receipt (DLR).

Sources (developer.vonage.com, checked 2026-12; the rows cite the page by key):

* ``api-errors``: https://developer.vonage.com/api-errors/sms (every submission status, its description
  and resolution) and https://developer.vonage.com/messaging/sms/guides/troubleshooting-sms ("SMS API
  error codes": "A status of zero indicates success; a non-zero value means something went wrong");
* ``dlr``: https://developer.vonage.com/messaging/sms/guides/delivery-receipts ("DLR status messages" and
  "DLR error codes").

The submission statuses and the receipt err-codes are two tables with overlapping numbers, so they are
two dicts; a receipt's code is looked up in ``DLR_TABLE`` (``classify`` without an HTTP status), a
submission's in ``SUBMISSION_TABLE`` (``classify`` with the answer's HTTP status, 200).

Whether Vonage may hold the message is a separate question, answered by ``submission_outcome`` (see
docs/vonage.md, "Uncertain Vonage submissions").
"""

from __future__ import annotations

from delivery.providers.base import ErrorClass, ErrorInfo, Outcome, Scope

C = ErrorClass

SUBMISSION_TABLE: dict[str, ErrorInfo] = {
    # api-errors 1: "Throttled. You are sending SMS faster than the account limit." Refused, not queued:
    # wait and resend.
    "1": ErrorInfo(C.THROTTLED, "throttled: faster than the account limit", Scope.ACCOUNT),
    # api-errors 2: "Missing Parameters ... from, to, api_key, api_secret or text" - this request.
    "2": ErrorInfo(C.PERMANENT, "missing parameters"),
    # api-errors 3: "Invalid Parameters. The value of one or more parameters is invalid."
    "3": ErrorInfo(C.PERMANENT, "invalid parameters"),
    # api-errors 4: "Invalid Credentials. Your API key and/or secret are incorrect, invalid or disabled."
    "4": ErrorInfo(C.ACCOUNT_FAULT, "invalid credentials (API key or secret)", Scope.ACCOUNT),
    # api-errors 5: "Internal Error. An error has occurred in the platform whilst processing this
    # message. If the error persists, contact support." Vonage does not say the message was not queued
    # ("whilst processing"): the class is transient, but the outcome is UNCERTAIN (submission_outcome).
    "5": ErrorInfo(C.TRANSIENT, "Vonage internal error while processing the message"),
    # api-errors 6: "Invalid Message. The platform was unable to process this message, for example, an
    # un-recognized number prefix."
    "6": ErrorInfo(C.PERMANENT, "invalid message (e.g. unrecognised number prefix)"),
    # api-errors 7: "Number Barred. The number you are trying to send messages to is blacklisted and may
    # not receive them." Vonage does not say it is the recipient's STOP: permanent, not an opt-out.
    "7": ErrorInfo(C.PERMANENT, "recipient number barred"),
    # api-errors 8: "Partner Account Barred. Your Vonage account has been suspended. Contact support."
    "8": ErrorInfo(C.ACCOUNT_FAULT, "account suspended", Scope.ACCOUNT),
    # api-errors 9: "Partner Quota Violation. You do not have sufficient credit to send the message.
    # Top-up and retry." Every message would fail the same way: hold the account.
    "9": ErrorInfo(C.ACCOUNT_FAULT, "insufficient credit", Scope.ACCOUNT),
    # api-errors 10: "Too Many Existing Binds. The number of simultaneous connections to the platform
    # exceeds your account allocation. Back-off and retry."
    "10": ErrorInfo(C.THROTTLED, "too many simultaneous connections", Scope.ACCOUNT),
    # api-errors 11: "Account Not Enabled For HTTP. Your account is not provisioned for HTTP."
    "11": ErrorInfo(C.ACCOUNT_FAULT, "account not enabled for the HTTP API", Scope.ACCOUNT),
    # api-errors 12: "Message Too Long. The message length exceeds the maximum allowed."
    "12": ErrorInfo(C.PERMANENT, "message too long"),
    # api-errors 14: "Invalid Signature. The signature supplied could not be verified." Our signature
    # secret or method: the same for every message.
    "14": ErrorInfo(C.ACCOUNT_FAULT, "invalid request signature (secret or method)", Scope.ACCOUNT),
    # api-errors 15: "Invalid Sender Address. You are using a non-authorized sender ID in the from field."
    "15": ErrorInfo(C.ACCOUNT_FAULT, "sender (from) not allowed", Scope.SENDER),
    # api-errors 16: "Invalid TTL. The ttl parameter values is invalid." (we clamp it: not expected)
    "16": ErrorInfo(C.PERMANENT, "invalid ttl"),
    # api-errors 19: "Facility Not Allowed. Your request makes use of a facility that is not enabled on
    # your account."
    "19": ErrorInfo(C.ACCOUNT_FAULT, "facility not enabled on the account", Scope.ACCOUNT),
    # api-errors 20: "Invalid Message Class. The message class value supplied was out of range (0-3)."
    "20": ErrorInfo(C.PERMANENT, "invalid message class"),
    # api-errors 22: "Invalid Network Code. The network code supplied was either not recognized, or
    # does not match the country of the destination address." (we send none)
    "22": ErrorInfo(C.PERMANENT, "invalid network code"),
    # api-errors 23: "Bad Callback :: Missing Protocol. You did not include https in the URL you set in
    # callback." Our receipts base URL: the same for every message.
    "23": ErrorInfo(C.ACCOUNT_FAULT, "callback URL refused (our receipts base URL)", Scope.ACCOUNT),
    # api-errors 29: "Non-Whitelisted Destination. The phone number you are trying to send messages to
    # is not in your list of test numbers" (a trial account): this recipient, as Twilio's 21608.
    "29": ErrorInfo(C.PERMANENT, "trial account: destination not whitelisted"),
    # api-errors 32: "Signature And API Secret Disallowed. A signed request may not also present an
    # api_secret."
    "32": ErrorInfo(C.ACCOUNT_FAULT, "signature and api_secret together", Scope.ACCOUNT),
    # api-errors 33: "Number De-activated. The number you are trying to send messages to is de-activated
    # and may not receive them."
    "33": ErrorInfo(C.PERMANENT, "recipient number de-activated"),
}

# Receipt err-codes (dlr, "DLR error codes"). Acted on only with the receipt's status: a "rejected"
# receipt (normalised "failed": the carrier refused it, nothing reached the handset) with a transient
# code is sent again; "failed"/"expired" (normalised "undelivered") end the message whatever the code.
DLR_TABLE: dict[str, ErrorInfo] = {
    "1": ErrorInfo(C.PERMANENT, "unknown (no further detail from the carrier)"),  # "Unknown"
    # "Absent Subscriber - Temporary": the handset is off or out of coverage.
    "2": ErrorInfo(C.TRANSIENT, "absent subscriber (temporary)"),
    "3": ErrorInfo(C.PERMANENT, "absent subscriber (permanent)"),  # "Absent Subscriber - Permanent"
    # "Call Barred by User": the subscriber's own barring, not our sender's opt-out list.
    "4": ErrorInfo(C.PERMANENT, "call barred by user"),
    "5": ErrorInfo(C.PERMANENT, "portability error"),  # "Portability Error"
    "6": ErrorInfo(C.PERMANENT, "anti-spam rejection"),  # "Anti-Spam Rejection"
    "7": ErrorInfo(C.TRANSIENT, "handset busy"),  # "Handset Busy"
    "8": ErrorInfo(C.TRANSIENT, "network error"),  # "Network Error"
    "9": ErrorInfo(C.PERMANENT, "illegal number"),  # "Illegal Number"
    "10": ErrorInfo(C.PERMANENT, "illegal message"),  # "Illegal Message"
    "11": ErrorInfo(C.PERMANENT, "unroutable"),  # "Unroutable"
    "12": ErrorInfo(C.PERMANENT, "destination unreachable"),  # "Destination Unreachable"
    "13": ErrorInfo(C.PERMANENT, "subscriber age restriction"),  # "Subscriber Age Restriction"
    "14": ErrorInfo(C.PERMANENT, "number blocked by carrier"),  # "Number Blocked by Carrier"
    "15": ErrorInfo(C.PERMANENT, "prepaid insufficient funds (recipient)"),  # "Pre-Paid - Insufficent funds"
    # "Gateway Quota Exceeded": Vonage's own routing capacity for the destination.
    "16": ErrorInfo(C.THROTTLED, "gateway quota exceeded"),
    # 50-54: Vonage's own filters and regulations ("Entity Filter", "Header Filter", "Content Filter",
    # "Consent Filter", "Regulation Error"): registration (entity, sender header) is our account's
    # configuration; content, consent and regulation concern this message.
    "50": ErrorInfo(C.ACCOUNT_FAULT, "entity filter (registration)", Scope.SENDER),
    "51": ErrorInfo(C.ACCOUNT_FAULT, "header filter (sender registration)", Scope.SENDER),
    "52": ErrorInfo(C.PERMANENT, "content filter"),
    "53": ErrorInfo(C.PERMANENT, "consent filter"),
    "54": ErrorInfo(C.PERMANENT, "regulation error"),
    "99": ErrorInfo(C.PERMANENT, "general error"),  # "General Error"
}

UNKNOWN_IN_CALLBACK = ErrorInfo(C.PERMANENT, "unknown provider error")
# A submission status outside the table: permanent, never resent blind (the operator may replay it).
UNKNOWN_AT_SUBMISSION = ErrorInfo(C.PERMANENT, "unknown Vonage status")
STATUS_INTERNAL_ERROR = "5"


def classify(error_code: str, http_status: int | None = None) -> ErrorInfo:
    """A receipt's err-code (``http_status`` None) or a submission's status / HTTP error."""
    code = (error_code or "").strip()
    if http_status is None:
        return DLR_TABLE.get(code, UNKNOWN_IN_CALLBACK)
    if code:
        return SUBMISSION_TABLE.get(code, UNKNOWN_AT_SUBMISSION)
    if http_status == 429:
        return ErrorInfo(C.THROTTLED, "too many requests", Scope.ACCOUNT)
    if http_status in (401, 403):
        return ErrorInfo(C.ACCOUNT_FAULT, f"HTTP {http_status} from the provider", Scope.ACCOUNT)
    if http_status == 404:  # a wrong REST host or path: every message would fail the same way
        return ErrorInfo(C.ACCOUNT_FAULT, "HTTP 404 from the provider", Scope.ACCOUNT)
    if http_status == 408 or http_status >= 500:
        return ErrorInfo(C.TRANSIENT, f"HTTP {http_status} from the provider")
    return ErrorInfo(C.PERMANENT, f"HTTP {http_status} from the provider")


def submission_outcome(status: str, info: ErrorInfo) -> Outcome:
    """What a non-zero ``status`` in an HTTP 200 answer says about the message: TRANSIENT (Vonage did
    not queue it: safe to send again) for the throttles (1, 10: refused for the rate, "Back-off and
    retry"); UNCERTAIN for 5 (an internal error "whilst processing this message": it may have been
    queued); REJECTED for every other code (refused by validation, the account or the recipient)."""
    if status == STATUS_INTERNAL_ERROR:
        return Outcome.UNCERTAIN
    if info.error_class == C.THROTTLED:
        return Outcome.TRANSIENT
    return Outcome.REJECTED


def http_outcome(http_status: int) -> Outcome:
    """An HTTP error answer (the SMS API answers 200 for every refusal it words itself): 429 (refused for
    the rate) and 401/403 (refused before processing) certainly did not queue it; any 5xx, 408 or
    anything else may come after the request was processed (a gateway's 502/503/504 after forwarding
    it): UNCERTAIN."""
    if http_status == 429:
        return Outcome.TRANSIENT
    if http_status in (400, 401, 403, 404, 405, 413, 415):
        return Outcome.REJECTED
    return Outcome.UNCERTAIN
