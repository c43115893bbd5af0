"""Test data in one place. Numbers are ones phonenumbers accepts as valid (fictional 555-01xx range)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.models import Tenant, api_key_create

RECIPIENT = "+14155550123"
SENDER = "+14155550100"


def tenant_with_key(slug: str = "acme", **kwargs) -> tuple[Tenant, str]:
    """A tenant that owns its default sender and sender pool (smsgw.tenancy.senders), and a key. Most tests
    give every tenant the same SENDER: it is then shared between them, as an operator would share it, so
    they all send from it and an opt-out to it applies to each (tests of ownership use distinct senders)."""
    # Unlimited unless a test sets its own: the operator's explicit choice (0), so tests of other
    # behaviour neither pay for nor trip the quotas; tests/limits sets them, and
    # tests/smsgw/test_tenant_create.py checks the finite defaults a real new tenant gets.
    for quota in ("daily_message_quota", "max_pending_scheduled", "send_rate_per_second"):
        kwargs.setdefault(quota, 0)
    tenant = Tenant.objects.create(
        name=slug.title(), slug=slug, default_from=kwargs.pop("default_from", SENDER), **kwargs
    )
    for value in (tenant.default_from, tenant.sender_pool):
        if value:
            sender_for(tenant, value)
    _, raw = api_key_create(tenant=tenant)
    return tenant, raw


def sender_for(tenant: Tenant, sender: str, *, shared: bool | None = None, provider: str = ""):
    """Assign ``sender`` to ``tenant`` as an operator would; shared (None) when another tenant has it."""
    from smsgw.tenancy.senders import sender_assign, sender_parse, sender_taken

    if shared is None:
        shared = sender_taken(tenant, sender_parse(sender)[1])
    return sender_assign(tenant=tenant, sender=sender, shared=shared, provider=provider)


def recipient(i: int) -> str:
    # +1 415 555 01xx is reserved-fictional and still "valid" for libphonenumber; widen with other
    # exchanges for bulk tests: +1 415 2xx xxxx are valid San Francisco numbers.
    return f"+1415{2000000 + i:07d}"


def message(
    tenant: Tenant,
    *,
    due_in: float = 0,
    status: str = Status.SCHEDULED,
    to: str = RECIPIENT,
    body: str = "hello",
    priority: str = "transactional",
    validity: float = 3600,
) -> Message:
    now = timezone.now()
    due = now + timedelta(seconds=due_in)
    msg = Message.objects.create(
        tenant=tenant,
        to=to,
        body=body,
        encoding="GSM-7",
        segments=1,
        from_number=tenant.default_from,
        priority=priority,
        due_at=due,
        expires_at=due + timedelta(seconds=validity),
        run_after=due,
        status=status,
    )
    transitions.event_record(msg.pk, kind="created", status=status)
    return msg


def messages_bulk(
    tenant: Tenant,
    n: int,
    *,
    due_at,
    priority: str = "transactional",
    validity: float = 3600,
    body: str = "bulk hello",
) -> list[int]:
    rows = [
        Message(
            tenant=tenant,
            to=recipient(i),
            body=body,
            encoding="GSM-7",
            segments=1,
            from_number=tenant.default_from,
            priority=priority,
            due_at=due_at,
            expires_at=due_at + timedelta(seconds=validity),
            run_after=due_at,
            status=Status.SCHEDULED,
        )
        for i in range(n)
    ]
    Message.objects.bulk_create(rows, batch_size=2000)
    return list(Message.objects.filter(tenant=tenant).order_by("id").values_list("id", flat=True))


def campaign_with_messages(
    tenant: Tenant,
    n: int,
    *,
    due_at=None,
    status: str = "active",
    priority: str = "bulk",
    validity: float = 3600,
    body: str = "campaign hello",
    made: bool = True,
):
    """A Campaign row and ``n`` scheduled messages linked to it, born through the one batch birth path
    the creation job uses (scheduling.messages.birth: one "created" event each, counted in the campaign's
    progress), without a recipient list to read: for tests about what happens to campaign messages."""
    from scheduling.messages.birth import messages_birth
    from scheduling.models import Campaign, new_public_id

    now = timezone.now()
    due_at = due_at or now
    campaign = Campaign.objects.create(
        tenant=tenant,
        name="test campaign",
        status=status,
        body=body,
        from_number=tenant.default_from,
        priority=priority,
        validity_seconds=int(validity),
        recipients_total=n,
        messages_made=n,
        made_at=now if made else None,
    )
    rows = [
        (
            {
                "public_id": new_public_id(),
                "tenant_id": tenant.pk,
                "to": recipient(i),
                "body": body,
                "encoding": "GSM-7",
                "segments": 1,
                "from_number": tenant.default_from,
                "priority": priority,
                "due_at": due_at,
                "expires_at": due_at + timedelta(seconds=validity),
                "run_after": due_at,
                "status": Status.SCHEDULED,
                "campaign_id": campaign.pk,
                "campaign_key": recipient(i),
                "version": 1,
                "created_at": now,
                "updated_at": now,
            },
            {"campaign": campaign.public_id},
        )
        for i in range(n)
    ]
    births = messages_birth(rows, actor="system:campaign", now=now, tenants={tenant.pk: tenant})
    return campaign, sorted(births.ids)


HOST_REASON = "this host (worker-7.dc2.internal) cannot reach the provider; waiting"


def queued_by_an_unreachable_host(msg_pk: int, **details) -> None:
    """The move a send worker makes when its host cannot reach the provider: the reason names the host,
    which tenants must never see (smsgw.values.actors)."""
    transitions.transition(
        msg_pk,
        from_statuses=[Status.SCHEDULED],
        to_status=Status.QUEUED,
        kind="host_unreachable",
        set_fields={"status_reason": HOST_REASON},
        details=details or None,
    )
