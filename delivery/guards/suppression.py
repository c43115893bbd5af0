"""The tenant's suppression list (docs/guards.md, "Opt-outs"): who opted out, from which sender, and the one
place that adds, removes and checks entries. Views, the inbound keywords (inbound.actions; which words
are keywords is inbound.keywords'), the send worker and the admin call these.

A recipient who texts STOP to a sender opts out of that sender (a From number, or the messaging service
the number belongs to); an entry with an empty sender covers every sender of the tenant. A message is
suppressed when an entry for its tenant and number names its sender or no sender."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from delivery.models import Suppression, SuppressionChange, SuppressionSource
from scheduling.lifecycle.reasons import ReasonCode
from smsgw.observability import events
from smsgw.runtime.db import fetchone_prepared, server_bound_cursor

REASON_OPTED_OUT = ReasonCode.OPTED_OUT


def suppression_add(
    *, tenant_id: int, number: str, sender: str = "", source: str, actor: str = "", keyword: str = ""
) -> bool:
    """Add an entry (audited). Returns False if it already existed (nothing changes, nothing audited)."""
    now = timezone.now()
    try:
        with transaction.atomic():
            Suppression.objects.create(
                tenant_id=tenant_id, number=number, sender=sender, source=source, created_at=now
            )
            SuppressionChange.objects.create(
                tenant_id=tenant_id,
                number=number,
                sender=sender,
                action=SuppressionChange.ADDED,
                source=source,
                actor=actor,
                keyword=keyword,
                created_at=now,
            )
    except IntegrityError:
        return False
    transaction.on_commit(lambda: events.suppression_changed(SuppressionChange.ADDED, source))
    return True


def suppression_remove(
    *, tenant_id: int, number: str, sender: str = "", source: str, actor: str = "", keyword: str = ""
) -> bool:
    """Remove the entry for exactly this sender (audited). Returns False if there was none."""
    now = timezone.now()
    with transaction.atomic():
        deleted, _ = Suppression.objects.filter(tenant_id=tenant_id, number=number, sender=sender).delete()
        if deleted:
            SuppressionChange.objects.create(
                tenant_id=tenant_id,
                number=number,
                sender=sender,
                action=SuppressionChange.REMOVED,
                source=source,
                actor=actor,
                keyword=keyword,
                created_at=now,
            )
            transaction.on_commit(lambda: events.suppression_changed(SuppressionChange.REMOVED, source))
    return bool(deleted)


def help_record(*, tenant_id: int, number: str, sender: str, keyword: str = "HELP") -> None:
    SuppressionChange.objects.create(
        tenant_id=tenant_id,
        number=number,
        sender=sender,
        action=SuppressionChange.HELP,
        source=SuppressionSource.INBOUND_KEYWORD,
        keyword=keyword,
        created_at=timezone.now(),
    )
    transaction.on_commit(
        lambda: events.suppression_changed(SuppressionChange.HELP, SuppressionSource.INBOUND_KEYWORD)
    )


def _sender_of(from_number: str, sender_pool: str) -> str:
    return sender_pool or from_number


# The check every single create runs (POST /v1/messages, the facade): one index probe on the unique
# constraint's (tenant, number, sender). A constant text, so on PostgreSQL it is prepared once per
# connection (fetchone_prepared); building the same query through the ORM was a quarter of a POST's web
# CPU (py-spy, `python -m bench ingest`, docs/benchmarks.md). The sender is the message's From, its
# messaging service or none; an empty one repeats "".
_SUPPRESSED = (
    f"SELECT 1 FROM {Suppression._meta.db_table} "  # noqa: S608 - the table name only
    "WHERE tenant_id = %s AND number = %s AND sender IN (%s, %s, %s) LIMIT 1"
)


def is_suppressed(*, tenant_id: int, number: str, from_number: str, sender_pool: str) -> bool:
    """Whether an entry covers this number from this sender (or from every sender)."""
    params = [tenant_id, number, "", from_number or "", sender_pool or ""]
    return fetchone_prepared(_SUPPRESSED, params) is not None


def suppressed_rows(rows: Iterable[dict]) -> set[int]:
    """Of message rows (id, tenant_id, to, from_number, sender_pool), the ids a suppression
    covers: one query for the whole batch. A row with ``exempt_suppression`` (a keyword's confirmation,
    scheduling.models.Message) is never covered."""
    rows = [r for r in rows if not r.get("exempt_suppression")]
    if not rows:
        return set()
    cond = Q()
    for tenant_id in {r["tenant_id"] for r in rows}:
        cond |= Q(tenant_id=tenant_id, number__in={r["to"] for r in rows if r["tenant_id"] == tenant_id})
    entries = set(Suppression.objects.filter(cond).values_list("tenant_id", "number", "sender"))
    if not entries:
        return set()
    out = set()
    for r in rows:
        key = (r["tenant_id"], r["to"])
        senders = ("", r["from_number"] or "", r["sender_pool"] or "")
        if any((*key, s) in entries for s in senders):
            out.add(r["id"])
    return out


def suppressed_numbers(*, tenant_id: int, numbers: list[str], from_number: str, sender_pool: str) -> set[str]:
    """Of many numbers sent from one sender (a campaign's batch), those a suppression covers. A tenant
    with no entries at all costs one index probe; otherwise one query with the numbers as a single
    array parameter (thousands of IN-list parameters cost more to build than to run)."""
    if not numbers or not Suppression.objects.filter(tenant_id=tenant_id).exists():
        return set()
    senders = sorted({"", from_number or "", sender_pool or ""})
    if connection.vendor != "postgresql":
        qs = Suppression.objects.filter(tenant_id=tenant_id, number__in=numbers, sender__in=senders)
        return set(qs.values_list("number", flat=True))
    with server_bound_cursor() as cur:
        cur.execute(
            f"SELECT number FROM {Suppression._meta.db_table} "  # noqa: S608 - the table name only
            "WHERE tenant_id = %b AND number = ANY(%b) AND sender = ANY(%b)",
            [tenant_id, numbers, senders],
        )
        return {row[0] for row in cur.fetchall()}


def from_provider_signals(signals: Iterable) -> None:
    """A provider refused sends because the recipient unsubscribed (Twilio 21610, delivery.models
    OptOutSignal): each adds (number, sender) to the tenant's list, audited as a provider error. Rare;
    one savepoint per signal."""
    for s in signals:
        suppression_add(
            tenant_id=s.tenant_id,
            number=s.to,
            sender=_sender_of(s.from_number, s.sender_pool),
            source=SuppressionSource.PROVIDER_ERROR,
            actor=f"provider:{s.provider}",
            keyword=str(s.error_code or "")[:16],
        )
