"""The last look at a batch before the send worker claims it: a recipient who opted out after acceptance
(delivery.guards.suppression) and a destination the tenant may no longer send to
(delivery.guards.destinations: its
permissions changed after acceptance) are never submitted. Both end ``cancelled`` with a timeline entry:
neither is a delivery failure (nothing was attempted, no provider said no), and ``cancelled`` is what an
opt-out already does, so the tenant sees one kind of "stopped by policy" outcome with its reason_code.

Cost: one query for the whole batch (it replaced a read of the batch plus a separate suppression query):
its rows, each with an EXISTS probe of the suppression list's unique index and its tenant's rules joined
in; then a few set lookups per number in Python. Moves only happen on the rare path."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q

from delivery.guards import destinations as guards
from delivery.guards import suppression
from delivery.models import Suppression
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.models import Tenant
from smsgw.observability import events
from smsgw.runtime.db import PgInts, is_postgres

log = logging.getLogger(__name__)

_TENANT_FIELDS = ("country", "allowed_countries", "deny_prefixes", "deny_exempt_prefixes", "default_from")


class _Row(TypedDict):
    id: int
    tenant_id: int
    to: str
    suppressed: bool


@dataclass
class Screened:
    opted_out: set[int] = field(default_factory=set)
    refused: dict[int, guards.Refusal] = field(default_factory=dict)

    @property
    def stopped(self) -> set[int]:
        return self.opted_out | set(self.refused)


# The sender pool's column, from the model: the field's name and its column's differ for a release.
_POOL = Message._meta.get_field("sender_pool").column
# A keyword's confirmation (Message.exempt_suppression) is the one message the list never stops.
_SUPPRESSED_SQL = (
    'NOT m."exempt_suppression" AND EXISTS (SELECT 1 FROM "delivery_suppression" s '
    'WHERE s."tenant_id" = m."tenant_id" '
    f'AND s."number" = m."to" AND s."sender" IN (\'\', m."from_number", m."{_POOL}"))'
)
# The tenant's rules ride along as text (JSON decoded once per tenant, not once per row).
_JSON_FIELDS = ("allowed_countries", "deny_prefixes", "deny_exempt_prefixes")
_TENANT_SQL = ", ".join(f't."{f}"::text' if f in _JSON_FIELDS else f't."{f}"' for f in _TENANT_FIELDS)


def _pg_rows(message_ids: list[int], rules: bool) -> tuple[list[_Row], dict[int, Tenant]]:
    source = 'FROM "scheduling_message" m'
    if rules:
        source = f'{source} JOIN "{Tenant._meta.db_table}" t ON t."id" = m."tenant_id"'
    sql = (
        f'SELECT m."id", m."tenant_id", m."to", {_SUPPRESSED_SQL}{", " + _TENANT_SQL if rules else ""} '
        f'{source} WHERE m."id" = ANY(%s::bigint[]) AND m."status" = %s'
    )
    with connection.cursor() as cur:
        cur.execute(sql, [PgInts(message_ids), Status.QUEUED])
        fetched = cur.fetchall()
    rows: list[_Row] = [{"id": r[0], "tenant_id": r[1], "to": r[2], "suppressed": r[3]} for r in fetched]
    tenants: dict[int, Tenant] = {}
    if rules:
        for r in fetched:
            if r[1] not in tenants:
                values = dict(zip(_TENANT_FIELDS, r[4:], strict=True))
                for f in _JSON_FIELDS:
                    values[f] = json.loads(values[f] or "[]")
                tenants[r[1]] = Tenant(pk=r[1], **values)
    return rows, tenants


def _rows(message_ids: list[int], rules: bool) -> tuple[list[_Row], dict[int, Tenant]]:
    """The batch's queued rows, each with whether a suppression entry covers it (its tenant and number,
    and its sender or none: the unique index's prefix; never a keyword's confirmation), and (``rules``)
    their tenants' current rules, read fresh: a permission changed a second ago applies to this batch. On
    PostgreSQL one statement, the ids as one array."""
    if is_postgres():
        return _pg_rows(message_ids, rules)
    covering = Suppression.objects.filter(tenant_id=OuterRef("tenant_id"), number=OuterRef("to")).filter(
        Q(sender="") | Q(sender=OuterRef("from_number")) | Q(sender=OuterRef("sender_pool"))
    )
    rows: list[_Row] = list(
        Message.objects.filter(pk__in=message_ids, status=Status.QUEUED)
        .annotate(
            suppressed=ExpressionWrapper(
                Exists(covering) & Q(exempt_suppression=False), output_field=BooleanField()
            )
        )
        .values("id", "tenant_id", "to", "suppressed")
    )
    tenants = {}
    if rules and rows:
        ids = {r["tenant_id"] for r in rows}
        tenants = {t.pk: t for t in Tenant.objects.filter(pk__in=ids).only(*_TENANT_FIELDS)}
    return rows, tenants


def _refused(rows: list[_Row], tenants: dict[int, Tenant]) -> dict[int, guards.Refusal]:
    by_tenant: dict[int, list[_Row]] = {}
    for r in rows:
        by_tenant.setdefault(r["tenant_id"], []).append(r)
    out: dict[int, guards.Refusal] = {}
    for tenant_id, group in by_tenant.items():
        refusals = guards.destination_refusals(tenants[tenant_id], [r["to"] for r in group])
        out.update({r["id"]: refusals[r["to"]] for r in group if r["to"] in refusals})
    return out


def batch_screen(message_ids: list[int], *, now: datetime) -> Screened:
    """Cancel what must not be submitted (inside the caller's transaction, before its claim) and say
    which ids those were."""
    rules = settings.GUARDS_ENABLED
    rows, tenants = _rows(message_ids, rules)
    screened = Screened(opted_out={r["id"] for r in rows if r["suppressed"]})
    if rules:
        screened.refused = _refused([r for r in rows if not r["suppressed"]], tenants)
    if screened.opted_out:
        cancelled = transitions.transition_many(
            sorted(screened.opted_out),
            from_status=Status.QUEUED,
            to_status=Status.CANCELLED,
            kind="cancelled",
            details={"reason": "recipient opted out (suppression list)"},
            set_fields={
                "run_after": None,
                "status_reason": "recipient opted out of this sender",
                "reason_code": suppression.REASON_OPTED_OUT,
            },
            now=now,
        )
        stopped = len(cancelled)
        transaction.on_commit(lambda: events.opted_out_stopped("execution", stopped))
    by_code: dict[tuple[str, str], list[int]] = {}
    for mid, refusal in screened.refused.items():
        by_code.setdefault((refusal.code, refusal.message), []).append(mid)
    for (code, text), ids in by_code.items():
        moved = transitions.transition_many(
            sorted(ids),
            from_status=Status.QUEUED,
            to_status=Status.CANCELLED,
            kind="cancelled",
            details={"reason": "destination refused", "refusal": code, "detail": text},
            set_fields={
                "run_after": None,
                "status_reason": f"destination refused: {text}"[:255],
                "reason_code": guards.REASON_REFUSED,
            },
            now=now,
        )
        log.info("send batch: %d messages not sent, destination refused (%s)", len(moved), code)
    return screened
