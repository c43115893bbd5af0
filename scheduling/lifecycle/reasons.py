"""Every ``Message.reason_code``: why a message waits, or why it ended where it did.

One list, so the API, the admin filter and the code that sets or compares a code agree on its spelling.
The model field keeps no ``choices`` (adding them would be a migration, and a code is stored for
messages written before a code is retired); transitions refuse a code not listed here. An empty
``reason_code`` means there is nothing to explain (the message is on its way, or was sent).
"""

from __future__ import annotations

from django.db import models


class ReasonCode(models.TextChoices):
    # Waiting, before or between attempts (the message stays scheduled or queued)
    PACED = "paced", "paced: the sender's or tenant's send rate"
    QUIET_HOURS = "quiet_hours", "due inside the recipient's quiet hours"
    TENANT_DISABLED = "tenant_disabled", "the tenant is disabled"
    CAMPAIGN_PAUSED = "campaign_paused", "its campaign is paused"
    QUOTA_EXCEEDED = "quota_exceeded", "the tenant's daily quota is used up"
    HELD_FOR_REVIEW = "held_for_review", "held for an operator's review (velocity)"
    REVIEW_RELEASED = "review_released", "released by an operator after review"
    PROVIDER_UNAVAILABLE = "provider_unavailable", "the provider's circuit is open"
    HOST_UNREACHABLE = (
        "host_unreachable",
        "this sending host cannot reach the provider; another host sends it",
    )
    CIRCUIT_PROBE = "circuit_probe", "sent as the probe of an open circuit"
    PROVIDER_HOLD = "provider_hold", "the provider account, sender or country is held"
    PROVIDER_THROTTLED = "provider_throttled", "the provider throttled it; resent later"
    PROVIDER_ERROR = "provider_error", "a transient provider error; retried"
    SUBMISSION_UNCERTAIN = "submission_uncertain", "no answer from the provider; looked up before any resend"
    TASK_LOST = "task_lost", "its send task is presumed lost; published again"
    FAILOVER = "failover", "moved to its route's next provider: the last one provably did not take it"
    # Ended unsent
    CANCELLED_BY_REQUEST = "cancelled_by_request", "cancelled by the tenant or an operator"
    CAMPAIGN_CANCELLED = "campaign_cancelled", "its campaign was cancelled"
    CANCELLED_BY_REPLY = "cancelled_by_reply", "the recipient replied with the tenant's cancel keyword"
    REVIEW_CANCELLED = "review_cancelled", "cancelled by an operator after review"
    OPTED_OUT = "opted_out", "the recipient opted out of this sender"
    DESTINATION_REFUSED = "destination_refused", "the destination is refused for this tenant"
    EXPIRED = "expired", "its validity passed before it could be sent"
    # Ended failed or undelivered
    PROVIDER_REJECTED = "provider_rejected", "rejected by the provider"
    RETRIES_EXHAUSTED = "retries_exhausted", "retries used up"
    UNCERTAIN_EXPIRED = "uncertain_expired", "validity passed while it was uncertain whether it was sent"
    PROVIDER_CANCELED = "provider_canceled", "canceled at the provider; never sent"
    PROVIDER_FAILED = "provider_failed", "the provider reported it failed"
    PROVIDER_UNDELIVERED = "provider_undelivered", "the carrier reported it undelivered"
    # Recorded sent without proof of which copy
    RECONCILED_AMBIGUOUS = (
        "reconciled_ambiguous",
        "uncertain, and the provider holds more matching copies than we sent: not resent; check it",
    )


# A scheduled message with one of these has passed the velocity guard (delivery.guards.velocity) and came
# back to wait (paced, the provider unavailable or held, a circuit's probe), or an operator released it
# after review: the guard does not count it again. A new recipient makes it a new message for the guard:
# an edit of ``to`` clears these (scheduling.messages.edits.message_update), and a held one too.
PASSED_VELOCITY: frozenset[str] = frozenset(
    {
        ReasonCode.PACED,
        ReasonCode.PROVIDER_UNAVAILABLE,
        ReasonCode.CIRCUIT_PROBE,
        ReasonCode.PROVIDER_HOLD,
        ReasonCode.REVIEW_RELEASED,
    }
)
RECOUNTED_ON_NEW_RECIPIENT: frozenset[str] = PASSED_VELOCITY | {ReasonCode.HELD_FOR_REVIEW}

# What a transition accepts as ``reason_code``: a listed code, or none.
REASON_CODES: frozenset[str] = frozenset({"", *ReasonCode.values})
