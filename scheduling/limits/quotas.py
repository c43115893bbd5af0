"""Tenant quotas at acceptance (docs/limits.md, "Tenant limits: quotas and API rate limits").

* ``daily_message_quota``: segments (what a provider bills) per quota window, the tenant's local day in
  its ``default_timezone`` (00:00 to 24:00 local). A message is booked against the window of the day it is
  DUE, so that acceptance and execution agree: a message for tomorrow uses tomorrow's quota.
* ``max_pending_scheduled``: messages accepted and not yet handed to a send worker for submission, i.e.
  in status ``scheduled`` or ``queued`` (a retry waiting for its backoff is pending again).

0 = unlimited, and then nothing here costs anything: no lock, no ledger row.

Exactness under concurrency: the daily booking is one conditional UPDATE on the window's ledger row
(``booked = booked + n WHERE booked + n <= quota``): on PostgreSQL a concurrent booking waits for the row
lock and re-checks the condition against the committed value; SQLite serialises writers. The pending
count runs after locking the tenant's row, so two requests cannot both see the last free place. Both run
in the transaction that inserts the message: a refused or failed insert gives the booking back.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from scheduling.limits.models import QuotaWindow
from smsgw.domain_errors import QuotaExceeded
from smsgw.models import Tenant
from smsgw.observability import events
from smsgw.values.timeutil import utc_text

DAILY = "daily_message_quota"
PENDING = "max_pending_scheduled"
REASON = "quota_exceeded"
PENDING_STATUSES = ("scheduled", "queued")


def exceeded(
    *,
    quota: str,
    limit: int,
    used: int,
    requested: int,
    resets_at: datetime | None,
    retry_after: int | None,
) -> QuotaExceeded:
    """The refusal, answered 429 with the quota named: {"error": {"code": "quota_exceeded", "quota",
    "limit", "used", "requested", "resets_at"}}; Retry-After when waiting helps (today's window)."""
    unit = "segments" if quota == DAILY else "pending messages"
    when = f"; it resets at {utc_text(resets_at)}" if resets_at else ""
    return QuotaExceeded(
        f"Quota {quota} exceeded: {used} of {limit} {unit} used, this request needs {requested}{when}.",
        extra={
            "quota": quota,
            "limit": limit,
            "used": used,
            "requested": requested,
            "resets_at": utc_text(resets_at) if resets_at else None,
        },
        retry_after=retry_after,
    )


def tenant_zone(tenant: Tenant) -> ZoneInfo:
    try:
        return ZoneInfo(tenant.default_timezone or "UTC")
    except (ValueError, KeyError):  # validated when set; a bad stored value must not break sending
        return ZoneInfo("UTC")


def window_day(tenant: Tenant, instant: datetime) -> date:
    """The quota window (a local date) an instant falls in."""
    return instant.astimezone(tenant_zone(tenant)).date()


def window_start(tenant: Tenant, day: date) -> datetime:
    """00:00 local of ``day`` as a UTC instant (on a DST change at midnight, the first instant of it)."""
    zone = tenant_zone(tenant)
    local = datetime.combine(day, time(0), tzinfo=zone)
    # A midnight that does not exist (a spring-forward at 00:00) resolves to the instant after the gap.
    return local.astimezone(UTC)


def window_end(tenant: Tenant, day: date) -> datetime:
    return window_start(tenant, day + timedelta(days=1))


def has_quota(tenant: Tenant) -> bool:
    return bool(tenant.daily_message_quota or tenant.max_pending_scheduled)


def windows_ensure(pairs: Iterable[tuple[int, date]]) -> None:
    """Ledger rows exist for these (tenant, day) pairs (INSERT ... ON CONFLICT DO NOTHING)."""
    rows = [QuotaWindow(tenant_id=t, day=d) for t, d in sorted(set(pairs))]
    if rows:
        QuotaWindow.objects.bulk_create(rows, ignore_conflicts=True)


def _retry_after(resets_at: datetime, now: datetime, due_day: date, today: date) -> int | None:
    # Waiting only helps for today's window: a later day's window resets after that day is over.
    if due_day != today:
        return None
    return max(1, math.ceil((resets_at - now).total_seconds()))


def daily_book(*, tenant: Tenant, due_at: datetime, segments: int, now: datetime) -> None:
    """Book ``segments`` in the window of ``due_at``, or raise QuotaExceeded. Call inside the
    transaction that stores the message."""
    limit = tenant.daily_message_quota
    if not limit or segments <= 0:
        return
    day = window_day(tenant, due_at)
    windows_ensure([(tenant.pk, day)])
    won = QuotaWindow.objects.filter(tenant_id=tenant.pk, day=day, booked__lte=limit - segments).update(
        booked=F("booked") + segments
    )
    if won:
        return
    used = QuotaWindow.objects.filter(tenant_id=tenant.pk, day=day).values_list("booked", flat=True).first()
    resets_at = window_end(tenant, day)
    events.quota_rejected(DAILY)
    raise exceeded(
        quota=DAILY,
        limit=limit,
        used=used or 0,
        requested=segments,
        resets_at=resets_at,
        retry_after=_retry_after(resets_at, now, day, window_day(tenant, now)),
    )


def bookings_add(
    items: Iterable[tuple[Tenant, datetime, int]],
    *,
    field: str = "booked",
    sign: int = 1,
    ensure: bool = True,
) -> None:
    """Add (or, with sign=-1, give back, never below 0) segments per (tenant, instant's window),
    unconditionally: a schedule's occurrences, a message deferred to the next window, a cancellation.
    One UPDATE per window touched, in (tenant, day) order so two writers never wait on each other in a
    cycle."""
    totals: dict[tuple[int, date], int] = defaultdict(int)
    for tenant, instant, segments in items:
        if tenant.daily_message_quota and segments:
            totals[(tenant.pk, window_day(tenant, instant))] += segments
    if not totals:
        return
    if sign > 0 and ensure:
        windows_ensure(totals)
    for (tenant_id, day), n in sorted(totals.items()):
        value = F(field) + n if sign > 0 else Greatest(F(field) - n, Value(0))
        QuotaWindow.objects.filter(tenant_id=tenant_id, day=day).update(**{field: value})


def pending_count(tenant: Tenant) -> int:
    from scheduling.models import Message, Priority, Status

    # Spelled per status so each count walks a partial index (scheduled: (priority, tenant, run_after)).
    scheduled = Message.objects.filter(
        tenant=tenant, status=Status.SCHEDULED, priority__in=list(Priority.values)
    ).count()
    return scheduled + Message.objects.filter(tenant=tenant, status=Status.QUEUED).count()


def pending_check(*, tenant: Tenant, adding: int = 1) -> None:
    """Refuse when ``adding`` more pending messages would pass max_pending_scheduled. Locks the tenant's
    row until the caller's transaction ends, so concurrent acceptances count one after the other."""
    limit = tenant.max_pending_scheduled
    if not limit:
        return
    list(Tenant.objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True))
    used = pending_count(tenant)
    if used + adding > limit:
        events.quota_rejected(PENDING)
        raise exceeded(
            quota=PENDING, limit=limit, used=used, requested=adding, resets_at=None, retry_after=None
        )


def acceptance_check(*, tenant: Tenant, due_at: datetime, segments: int, now: datetime) -> None:
    """Both quotas for one new message, inside the transaction that inserts it."""
    assert transaction.get_connection().in_atomic_block, "quotas are booked in the inserting transaction"
    pending_check(tenant=tenant)
    daily_book(tenant=tenant, due_at=due_at, segments=segments, now=now)


def rebook(
    *,
    tenant: Tenant,
    old_due: datetime,
    old_segments: int,
    new_due: datetime,
    new_segments: int,
    now: datetime,
) -> None:
    """A scheduled message moves to another window or changes size: give the old booking back, book the
    new one (QuotaExceeded if it does not fit; the caller's transaction then rolls both back)."""
    if not tenant.daily_message_quota:
        return
    if window_day(tenant, old_due) == window_day(tenant, new_due) and new_segments <= old_segments:
        if new_segments < old_segments:
            bookings_add([(tenant, old_due, old_segments - new_segments)], sign=-1)
        return
    bookings_add([(tenant, old_due, old_segments)], sign=-1)
    daily_book(tenant=tenant, due_at=new_due, segments=new_segments, now=now)


def usage_view(tenant: Tenant, now: datetime) -> dict:
    """What GET /v1/capacity shows of the quotas: limits, today's window and the pending count."""
    day = window_day(tenant, now)
    row: Mapping[str, object] = (
        QuotaWindow.objects.filter(tenant_id=tenant.pk, day=day).values("booked", "released").first() or {}
    )
    return {
        DAILY: {
            "limit": tenant.daily_message_quota or None,
            "unit": "segments",
            "window": day.isoformat(),
            "timezone": tenant_zone(tenant).key,
            "booked": row.get("booked", 0),
            "released": row.get("released", 0),
            "resets_at": utc_text(window_end(tenant, day)),
        },
        PENDING: {
            "limit": tenant.max_pending_scheduled or None,
            "used": pending_count(tenant) if tenant.max_pending_scheduled else None,
        },
        "quota_exceeded_policy": tenant.quota_exceeded_policy,
    }
