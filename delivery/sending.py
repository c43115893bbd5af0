"""Send worker service: queued -> sending -> (sent | queued for retry | failed | uncertain), per batch.

One task carries a batch of ids, but every message keeps its own CAS, attempt row, retry schedule and
timeline. Two short transactions per batch (claim + attempts; outcomes) instead of several per SMS.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery.attempts import attempts_finish, attempts_start
from delivery.models import Attempt, AttemptOutcome
from delivery.providers import get_adapter
from delivery.providers.base import Outcome, Submission, SubmitResult
from delivery.retry import retry_decide
from scheduling import transitions
from scheduling.models import Status

log = logging.getLogger(__name__)

# How long an uncertain attempt waits before the reconciler asks the provider about it: long enough
# for a slow provider to have finished processing the request we gave up on.
UNCERTAIN_RECHECK_SECONDS = 10

CLAIM_RETURNING = (
    "id",
    "version",
    "tenant_id",
    "to",
    "body",
    "from_number",
    "messaging_service_sid",
    "attempt_count",
    "due_at",
    "expires_at",
)


@dataclass
class BatchReport:
    claimed: int = 0
    expired: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def status_callback_url() -> str:
    base = settings.SMSGW_PUBLIC_BASE_URL.rstrip("/")
    return f"{base}/receipts/twilio/" if base else ""


def send_batch(message_ids: list[int]) -> BatchReport:
    report = BatchReport()
    adapter = get_adapter()
    now = timezone.now()
    with transaction.atomic():
        expired = transitions.transition_many(
            message_ids,
            from_status=Status.QUEUED,
            to_status=Status.EXPIRED,
            kind="expired",
            extra_where='"expires_at" <= %s',
            extra_params=[now],
            set_fields={
                "expired_at": now,
                "run_after": None,
                "status_reason": "validity passed while queued",
            },
            now=now,
        )
        report.expired = len(expired)
        # The CAS that makes duplicate tasks harmless: a re-published or redelivered batch finds its
        # rows already past `queued` and claims nothing.
        rows = transitions.transition_many(
            message_ids,
            from_status=Status.QUEUED,
            to_status=Status.SENDING,
            kind="attempt_started",
            set_fields={
                "sending_at": now,
                "run_after": now + timedelta(seconds=settings.SENDING_LEASE_SECONDS),
                "provider": adapter.name,
            },
            bump_attempts=True,
            returning=CLAIM_RETURNING,
            details=lambda mid: {"provider": adapter.name},
            now=now,
        )
        # Committed with the claim, before any provider call: a crash from here on leaves evidence.
        attempts = attempts_start(rows, provider=adapter.name, started_at=now)
    report.claimed = len(rows)
    if not rows:
        return report

    callback = status_callback_url()
    submissions = [
        Submission(
            message_id=r["id"],
            to=r["to"],
            body=r["body"],
            from_number=r["from_number"],
            messaging_service_sid=r["messaging_service_sid"],
            status_callback=callback,
            idempotency_token=a.idempotency_token,
        )
        for r, a in zip(rows, attempts, strict=True)
    ]
    results = adapter.submit_many(submissions)
    outcomes_record(rows, attempts, results)
    for res in results:
        report.outcomes[res.outcome] += 1
    return report


def outcomes_record(rows: list[dict], attempts: list[Attempt], results: list[SubmitResult]) -> None:
    now = timezone.now()
    sent, retry, failed, uncertain = [], [], [], []
    for row, attempt, res in zip(rows, attempts, results, strict=True):
        attempt.finished_at = now
        attempt.http_status = res.http_status
        attempt.provider_code = res.error_code
        attempt.provider_message_id = res.provider_message_id
        attempt.latency_ms = res.latency_ms
        attempt.response = res.response
        version = row["version"]
        if res.outcome == Outcome.ACCEPTED:
            attempt.outcome = AttemptOutcome.ACCEPTED
            sent.append(
                (
                    row["id"],
                    version,
                    {
                        "provider_message_id": res.provider_message_id,
                        "provider_status": res.provider_status,
                    },
                )
            )
        elif res.outcome == Outcome.TRANSIENT:
            attempt.outcome = AttemptOutcome.TRANSIENT_ERROR
            decision = retry_decide(
                attempt_number=row["attempt_count"],
                now=now,
                first_due=row["due_at"],
                expires_at=row["expires_at"],
                retry_after=res.retry_after,
            )
            reason = f"{res.http_status or 'network'} {res.error_code} {res.error_message}".strip()[:200]
            if decision.retry:
                retry.append(
                    (
                        row["id"],
                        version,
                        {
                            "run_after": decision.run_after,
                            "error_code": res.error_code,
                            "status_reason": f"transient: {reason}; {decision.reason}"[:255],
                        },
                    )
                )
            else:
                failed.append(
                    (
                        row["id"],
                        version,
                        {
                            "error_code": res.error_code,
                            "status_reason": f"{decision.reason}; last: {reason}"[:255],
                        },
                    )
                )
        elif res.outcome == Outcome.REJECTED:
            attempt.outcome = AttemptOutcome.REJECTED
            failed.append(
                (
                    row["id"],
                    version,
                    {
                        "error_code": res.error_code,
                        "status_reason": f"rejected by provider: {res.error_code} {res.error_message}"[:255],
                    },
                )
            )
        else:
            attempt.outcome = AttemptOutcome.UNCERTAIN
            uncertain.append((row["id"], version, {}))

    per_row = {mid: values for mid, _, values in (*sent, *retry, *failed)}
    with transaction.atomic():
        attempts_finish(attempts, finished_at=now)
        transitions.transition_versioned(
            sent,
            from_status=Status.SENDING,
            to_status=Status.SENT,
            kind="sent",
            per_row_columns=("provider_message_id", "provider_status"),
            set_fields={"sent_at": now, "run_after": None, "error_code": "", "status_reason": ""},
            details=lambda mid: {"provider_message_id": per_row[mid]["provider_message_id"]},
            now=now,
        )
        transitions.transition_versioned(
            retry,
            from_status=Status.SENDING,
            to_status=Status.QUEUED,
            kind="retry_scheduled",
            per_row_columns=("run_after", "error_code", "status_reason"),
            details=lambda mid: {
                "retry_at": per_row[mid]["run_after"].isoformat(),
                "reason": per_row[mid]["status_reason"],
            },
            now=now,
        )
        transitions.transition_versioned(
            failed,
            from_status=Status.SENDING,
            to_status=Status.FAILED,
            kind="failed",
            per_row_columns=("error_code", "status_reason"),
            set_fields={"failed_at": now, "run_after": None},
            details=lambda mid: {"dead_letter": True, "reason": per_row[mid]["status_reason"]},
            now=now,
        )
        transitions.transition_versioned(
            uncertain,
            from_status=Status.SENDING,
            to_status=Status.SENDING,
            kind="attempt_uncertain",
            set_fields={
                "run_after": now + timedelta(seconds=UNCERTAIN_RECHECK_SECONDS),
                "status_reason": "provider did not answer; will look the message up before any resend",
            },
            now=now,
        )
    if failed or uncertain:
        log.warning("send batch: %d failed, %d uncertain", len(failed), len(uncertain))
