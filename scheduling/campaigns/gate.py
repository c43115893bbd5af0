"""What a paused or cancelled campaign means to the release step and the send worker.

Pausing or cancelling writes one row (the Campaign), never its messages: at 1M recipients an UPDATE over
every message would take tens of seconds and lock rows the workers are claiming. Instead each place that
hands a message on looks at the campaign status of the few rows it holds:

* the release step (scheduling.dispatch.release) parks a paused campaign's due messages where they are
  (``campaign_paused``, run_after at their expiry, one timeline entry) and cancels a cancelled one's;
* the send claim (delivery.sending.worker) excludes both in the claiming statement itself, then parks or
  cancels what it skipped, so nothing lingers as a stale ``queued`` row for recovery to republish;
* the last check before a paced submission is delivery.sending.campaign_watch (a per-process view <= 1 s old).

Resuming releases the parked ones by their reason (scheduling.campaigns.control).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Campaign, CampaignStatus, Message, Status
from smsgw.runtime.db import PgInts, is_postgres

REASON_PAUSED = ReasonCode.CAMPAIGN_PAUSED
REASON_CANCELLED = ReasonCode.CAMPAIGN_CANCELLED
HALTED = (CampaignStatus.PAUSED, CampaignStatus.CANCELLED)
# A parked message of a paused campaign is not looked at again before this (or its expiry, which comes
# first for any ordinary validity): resume releases it, so no pass re-reads a long pause's backlog.
PAUSE_PARK_DAYS = 30
PAUSED_TEXT = "campaign paused: waiting until it is resumed"

CAMPAIGN_TABLE = Campaign._meta.db_table
MESSAGE_TABLE = Message._meta.db_table
# The claim's exclusion, a primary-key probe per campaign row of the batch (no scan of campaigns): the
# statement that moves a message to `sending` never takes one whose campaign is halted.
# (Table names from model metadata; the statuses are parameters.)
NOT_HALTED_SQL = (
    f'("campaign_id" IS NULL OR NOT EXISTS (SELECT 1 FROM "{CAMPAIGN_TABLE}" AS hc '  # noqa: S608
    f'WHERE hc."id" = "{MESSAGE_TABLE}"."campaign_id" AND hc."status" IN (%s, %s)))'
)
NOT_HALTED_PARAMS = [str(s) for s in HALTED]


def halted(campaign_ids: Iterable[int | None], *, lock: bool = False) -> dict[int, str]:
    """The paused or cancelled ones among these campaigns, with their status (no query for none).

    ``lock``: the caller parks or cancels messages on this answer in its transaction. The halted rows are
    then held FOR SHARE until it commits, so a resume (an UPDATE of the row) waits for those parks to be
    visible before it releases the waiting messages: none is parked behind its back and left waiting."""
    ids = sorted({cid for cid in campaign_ids if cid is not None})
    if not ids:
        return {}
    if not (lock and is_postgres()):
        return dict(Campaign.objects.filter(pk__in=ids, status__in=HALTED).values_list("id", "status"))
    with connection.cursor() as cur:
        cur.execute(
            f'SELECT "id", "status" FROM "{CAMPAIGN_TABLE}" WHERE "id" = ANY(%s) '  # noqa: S608
            'AND "status" IN (%s, %s) ORDER BY "id" FOR SHARE',
            [PgInts(ids), *NOT_HALTED_PARAMS],
        )
        return dict(cur.fetchall())


def pause_until(now: datetime) -> datetime:
    return now + timedelta(days=PAUSE_PARK_DAYS)


def cancel_rows(rows: Iterable[Mapping[str, Any]], now: datetime, *, actor: str = "system") -> int:
    """Cancel these rows (``id``, ``version``, ``status``) of cancelled campaigns, each by its own
    compare-and-set: a message that moved on since it was read is left as it is now."""
    by_status: dict[str, list[tuple[int, int, dict]]] = {}
    for r in rows:
        if r["status"] in (Status.SCHEDULED, Status.QUEUED):
            by_status.setdefault(r["status"], []).append((r["id"], r["version"], {}))
    cancelled = 0
    for status, items in by_status.items():
        cancelled += len(
            transitions.transition_versioned(
                items,
                from_status=status,
                to_status=Status.CANCELLED,
                kind="cancelled",
                actor=actor,
                details={"reason": "campaign cancelled"},
                set_fields=CANCEL_FIELDS,
                now=now,
            )
        )
    return cancelled


CANCEL_FIELDS = {
    "run_after": None,
    "status_reason": "campaign cancelled",
    "reason_code": REASON_CANCELLED,
}
