"""Every ``MessageEvent.kind``: the timeline's entries, as the API's ``kind`` enum names them.

The kinds are written where each thing happens (the transitions' callers, the outcome tables' ``Move``, the
gates' ``Park``, the notes); this list is what a tenant can rely on, and the OpenAPI schema's ``EventKind``
is made from it. tests/scheduling/lifecycle/test_event_kinds.py reads the code for every kind it writes and
fails on one missing here. Like ``ReasonCode``, the model field keeps no ``choices``: a kind stays readable on
entries written before it was retired.
"""

from __future__ import annotations

from django.db import models


class EventKind(models.TextChoices):
    # Birth and the tenant's changes
    CREATED = "created", "accepted (its due time, segments and quiet hours in details)"
    EDITED = "edited", "its body or other fields were changed while scheduled"
    RESCHEDULED = "rescheduled", "its due time was changed while scheduled"
    CANCELLED = "cancelled", "cancelled: by the tenant, an operator, a campaign, a reply or a guard"
    CANCEL_REPEATED = "cancel_repeated", "a cancel of a message already cancelled (the same answer)"
    CANCEL_REJECTED = "cancel_rejected", "a cancel refused: too late (409)"
    REDACTED = "redacted", "its body or number was redacted or erased"
    DELETED = "deleted", "deleted once final: its content removed, its record kept"
    REPLAYED = "replayed", "a failed message queued again by an operator"
    CORRECTED = "corrected", "a failed message's body, sender or route changed by an operator before a replay"
    SCHEDULE_CHANGE_NOT_APPLIED = (
        "schedule_change_not_applied",
        "its schedule changed, but this occurrence was already on its way",
    )
    # Waiting before it goes (it stays scheduled or queued)
    QUIET_HOURS_DEFERRED = "quiet_hours_deferred", "moved out of the recipient's quiet hours"
    PACED = "paced", "waits for the sender's or tenant's send rate"
    QUOTA_DEFERRED = "quota_deferred", "waits for the tenant's daily quota to reset"
    TENANT_DISABLED = "tenant_disabled", "waits: the tenant is disabled"
    CAMPAIGN_PAUSED = "campaign_paused", "waits: its campaign is paused"
    HELD_FOR_REVIEW = "held_for_review", "held for an operator's review (velocity guard)"
    REVIEW_RELEASED = "review_released", "released by an operator after review"
    PROVIDER_UNAVAILABLE = "provider_unavailable", "waits: the provider's circuit is open"
    HOST_UNREACHABLE = "host_unreachable", "this sending host cannot reach the provider; another sends it"
    HOST_PROBE = "host_probe", "sent as the probe of this host's open circuit"
    HELD = "held", "waits: the provider account, sender or country is held"
    HOLD_RELEASED = "hold_released", "the provider hold it waited for was released"
    QUEUED = "queued", "handed to a send worker"
    REPUBLISHED = "republished", "handed to a send worker again (its task was lost or its wait ended)"
    # Attempts and their outcomes
    ATTEMPT_STARTED = "attempt_started", "a submission to the provider began"
    ATTEMPT_UNCERTAIN = "attempt_uncertain", "no answer from the provider: it is looked up before any resend"
    FENCED = "fenced", "restored from a backup while on its way: the provider is asked before any resend"
    THROTTLED = "throttled", "the provider throttled it; it is resent later"
    RETRY_SCHEDULED = "retry_scheduled", "a transient failure; it is retried after a backoff"
    FAILOVER = "failover", "moved to its route's next provider"
    SENT = "sent", "the provider accepted it"
    DELIVERED = "delivered", "the carrier reported it delivered"
    UNDELIVERED = "undelivered", "the carrier reported it undelivered"
    FAILED = "failed", "it failed (rejected, retries used up, or the provider reported a failure)"
    EXPIRED = "expired", "its validity passed before it could be sent"
    RECEIPT = "receipt", "a delivery receipt that changed nothing (details say why)"
    DUPLICATE_SUBMISSION = "duplicate_submission", "the provider holds a second copy of it"
    STATUS_LOOKUP_STOPPED = "status_lookup_stopped", "no receipt came, and looking its status up stopped"
    # Reconciling an uncertain submission with the provider's records
    RECONCILE_SCHEDULED = "reconcile_scheduled", "a look-up at the provider is scheduled"
    RECONCILE_DEFERRED = "reconcile_deferred", "the look-up is put off (the provider is unavailable)"
    RECONCILE_INCONCLUSIVE = "reconcile_inconclusive", "the look-up could not tell; it stays uncertain"
    RECONCILE_HELD = "reconcile_held", "the look-up waits for a provider hold"
    RECONCILE_ABSENT_ONCE = "reconcile_absent_once", "not found once; looked up again before any resend"
    RECONCILED_ABSENT = "reconciled_absent", "proved absent at the provider: sent again"
    RECONCILED_FOUND = "reconciled_found", "found at the provider: recorded sent, not resent"
    RECONCILED_AMBIGUOUS = "reconciled_ambiguous", "more matching copies at the provider than sent"
    # Replies
    REPLY_RECEIVED = "reply_received", "the recipient replied (the reply's id in details)"
    REPLY_CONFIRMED = "reply_confirmed", "the recipient confirmed it with the tenant's confirm keyword"
