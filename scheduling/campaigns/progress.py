"""Campaign progress by status, kept in sharded counters (CampaignCounter) so reading it never counts the
message table: at 1M recipients a count(*) per request would cost seconds.

Every change of a campaign message's status adds +1 to the new status and -1 to the old one (a birth adds
to ``scheduled`` only), in the same transaction as the change. The row written is one of SHARDS per
(campaign, status), picked at random per call: concurrent send workers finishing batches of one campaign
then rarely wait on the same row lock until commit. A read sums at most SHARDS x statuses rows.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable

from django.db import connection

from scheduling.models import CampaignCounter

SHARDS = 16


def progress_add(deltas: Iterable[tuple[int, str, int]]) -> None:
    """Add ``(campaign_id, status, delta)`` amounts (merged per key first). Call inside the transaction
    that makes the change, so the counts commit or roll back with it."""
    merged: Counter[tuple[int, str]] = Counter()
    for campaign_id, status, delta in deltas:
        merged[(campaign_id, status)] += delta
    rows = [(cid, status, n) for (cid, status), n in merged.items() if n]
    if not rows:
        return
    shard = random.randrange(SHARDS)  # spreading lock contention, not security
    table = connection.ops.quote_name(CampaignCounter._meta.db_table)
    # Sorted, so two transactions touching the same rows lock them in the same order (no deadlock).
    rows.sort()
    values = ", ".join(["(%s, %s, %s, %s)"] * len(rows))
    params: list = []
    for cid, status, n in rows:
        params += [cid, status, shard, n]
    with connection.cursor() as cur:
        cur.execute(
            f'INSERT INTO {table} ("campaign_id", "status", "shard", "count") VALUES {values} '  # noqa: S608
            f'ON CONFLICT ("campaign_id", "status", "shard") DO UPDATE SET "count" = {table}."count" + '
            f'EXCLUDED."count"',
            params,
        )


def progress_read(campaign_id: int) -> dict[str, int]:
    """Messages of the campaign by status (statuses with none are absent)."""
    totals: Counter[str] = Counter()
    for status, n in CampaignCounter.objects.filter(campaign_id=campaign_id).values_list("status", "count"):
        totals[status] += n
    return {status: n for status, n in totals.items() if n}


def progress_read_many(campaign_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """progress_read for a page of campaigns, in one query."""
    ids = list(campaign_ids)
    out: dict[int, Counter[str]] = {cid: Counter() for cid in ids}
    rows = CampaignCounter.objects.filter(campaign_id__in=ids).values_list("campaign_id", "status", "count")
    for cid, status, n in rows:
        out[cid][status] += n
    return {cid: {s: n for s, n in c.items() if n} for cid, c in out.items()}
