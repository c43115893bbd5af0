"""Many distinct messages in one request (``POST /v1/messages/batch``, docs/api.md): each item is what
``POST /v1/messages`` takes, with its own optional idempotency key, and gets its own answer: created,
replayed, or refused with the error a single request would have had. A refused item stores nothing and
changes nothing; the others are stored.

The same rules as one message (``service.message_build``, the same birth path, the same fingerprint: an item
and a single request with the same key and body are replays of each other). What a batch saves is the
per-request work and the per-message round trips: the idempotency keys, the destination guards and the
suppression list are each asked once for the whole batch (and whether the tenant owns a sender, once per
sender named), and, for a tenant without quotas, every new message and its "created" event go in by one
statement (``birth.messages_birth``). A tenant with quotas books each item on its own, in its own savepoint,
so one item over the quota is refused (429) and the others go in, as separate requests would.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.limits import quotas
from scheduling.messages import acceptance, birth
from scheduling.messages import service as services
from scheduling.models import Message
from smsgw.domain_errors import DomainError, InvalidInput
from smsgw.models import Tenant
from smsgw.tenancy.senders import OwnershipCheck
from smsgw.values.timeutil import ResolvedTime


@dataclass
class Item:
    """One item of a batch: its validated data and key, or (``data`` None) the error its validation gave."""

    data: dict[str, Any] | None
    idempotency_key: str | None = None
    error: Exception | None = None


@dataclass
class Outcome:
    """An item's answer: ``created`` (a new message), a replay (``message`` set, not created), or
    ``error`` (nothing stored for it)."""

    message: Message | None = None
    created: bool = False
    error: Exception | None = None


def messages_create_batch(*, tenant: Tenant, actor: str, items: list[Item]) -> list[Outcome]:
    """Store the batch's valid items; one Outcome per item, in order. Two items with the same key are
    one message: the first is stored, the second is its replay (or a 422 if its body differs)."""
    out = [Outcome(error=item.error) for item in items]
    fingerprints = {
        i: services.fingerprint_of(item.data) for i, item in enumerate(items) if item.data is not None
    }
    todo, repeats = _first_of_each_key(items, fingerprints)

    keyed = {items[i].idempotency_key: i for i in todo if items[i].idempotency_key}
    if keyed:
        for existing in Message.objects.filter(tenant=tenant, idempotency_key__in=list(keyed)):
            i = keyed[existing.idempotency_key]
            out[i] = _replay(existing, fingerprints[i])
        todo = [i for i in todo if out[i].message is None and out[i].error is None]

    built: dict[int, tuple[Message, ResolvedTime | None]] = {}
    now = timezone.now()
    owns = OwnershipCheck(tenant)
    for i in todo:
        data = items[i].data
        assert data is not None
        try:
            built[i] = services.message_build(
                tenant=tenant,
                data=data,
                idempotency_key=items[i].idempotency_key,
                fingerprint=fingerprints[i],
                now=now,
                checks=False,
                owns=owns,
            )
        except DomainError as exc:
            out[i].error = exc
    for i, refusal in _acceptance_refusals(tenant, {i: m for i, (m, _) in built.items()}).items():
        out[i].error = refusal
        del built[i]

    if quotas.has_quota(tenant):
        _born_one_by_one(tenant, actor, built, out)
    else:
        _born_together(tenant, actor, built, out)
    for i, earlier in repeats.items():
        first = out[earlier]
        if first.message is not None:
            out[i] = _replay(first.message, fingerprints[i])
        else:  # the first of the key was refused: so is its repeat, for the same reason
            out[i] = Outcome(error=first.error)
    return out


def _first_of_each_key(items: list[Item], valid: dict[int, str]) -> tuple[list[int], dict[int, int]]:
    """The valid items to store (``valid``: their indexes), and each later item that repeats an earlier
    one's key (item -> that earlier item)."""
    todo: list[int] = []
    repeats: dict[int, int] = {}
    first_with_key: dict[str, int] = {}
    for i in sorted(valid):
        key = items[i].idempotency_key
        if key and key in first_with_key:
            repeats[i] = first_with_key[key]
            continue
        if key:
            first_with_key[key] = i
        todo.append(i)
    return todo, repeats


def _replay(existing: Message, fingerprint: str) -> Outcome:
    try:
        return Outcome(message=services.idempotent_replay(existing, fingerprint))
    except DomainError as exc:
        return Outcome(error=exc)


def _acceptance_refusals(tenant: Tenant, messages: dict[int, Message]) -> dict[int, InvalidInput]:
    """The destination guards and the suppression list, asked once per batch (the suppression list once
    per sender): the refusals a single request gets (``service.destination_error``,
    ``service.suppression_error``)."""
    refused: dict[int, InvalidInput] = {}
    if not messages:
        return refused
    destinations = acceptance.destination_refusals(tenant, sorted({m.to for m in messages.values()}))
    by_sender: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, m in messages.items():
        refusal = destinations.get(m.to)
        if refusal is not None:
            refused[i] = services.destination_error(refusal)
        else:
            by_sender[(m.from_number, m.sender_pool)].append(i)
    for (from_number, pool), indexes in sorted(by_sender.items()):
        suppressed = acceptance.suppressed_numbers(
            tenant_id=tenant.pk,
            numbers=sorted({messages[i].to for i in indexes}),
            from_number=from_number,
            sender_pool=pool,
        )
        refused.update((i, services.suppression_error()) for i in indexes if messages[i].to in suppressed)
    return refused


def _born_one_by_one(
    tenant: Tenant, actor: str, built: dict[int, tuple[Message, ResolvedTime | None]], out: list[Outcome]
) -> None:
    """A tenant with quotas: each item is stored as a single request stores it (``service.message_born``),
    in its own savepoint inside the request's transaction, so an item over the quota is refused and
    rolled back alone."""
    for i, (message, resolved) in built.items():
        try:
            stored, created = services.message_born(
                tenant=tenant, actor=actor, message=message, resolved=resolved
            )
        except DomainError as exc:  # QuotaExceeded; IdempotencyMismatch for a raced key
            out[i] = Outcome(error=exc)
        else:
            out[i] = Outcome(message=stored, created=created)


def _born_together(
    tenant: Tenant, actor: str, built: dict[int, tuple[Message, ResolvedTime | None]], out: list[Outcome]
) -> None:
    """A tenant without quotas: every new message and its "created" event in one statement per
    birth.INSERT_BATCH rows, in one transaction."""
    if not built:
        return
    rows: list[tuple[dict | Message, dict | str]] = [
        (_row(message), services.intent_details(message, resolved)) for message, resolved in built.values()
    ]
    with transaction.atomic():
        births = birth.messages_birth(rows, actor=actor, now=timezone.now(), tenants={tenant.pk: tenant})
    # Read back in one query: the answer is the stored row, as a later GET shows it (the route the
    # router chose, the columns the database filled in).
    stored = Message.objects.in_bulk(list(births.id_of.values()))
    for i, (message, _) in built.items():
        if message.public_id in births.id_of:
            out[i] = Outcome(message=stored[births.id_of[message.public_id]], created=True)
        else:
            try:
                out[i] = Outcome(message=services.raced_replay(tenant, message))
            except DomainError as exc:
                out[i] = Outcome(error=exc)


def _row(message: Message) -> dict[str, Any]:
    """An unsaved message as the row ``birth.messages_birth`` inserts in bulk: each column's value as
    save() would send it; a column left to its database default is left out."""
    row = {}
    for f in birth.insert_fields(Message):
        value = f.pre_save(message, True)
        if not hasattr(value, "resolve_expression"):
            row[f.attname] = value
    return row
