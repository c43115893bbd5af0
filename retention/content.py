"""What removing a message's content means, in one place (docs/erasure.md): the body, the full recipient
number, the tenant's metadata and whatever copies of them the other tables hold. Used by the on-demand
redaction (retention.redact), the erasure of a number (retention.erase), the Twilio-compatible
``ContentRetention`` / ``AddressRetention`` (retention.requested) and the content horizon of the
retention job.

After removal a message keeps its timeline, attempts, receipts and webhook history as evidence, but:
- ``body`` is empty and ``metadata`` is ``{}``;
- ``to`` is masked (``+1415*****23``: country and a few digits, never the whole number), and a
  campaign recipient's key (which is its number) becomes ``erased:<id>``;
- every JSON column that mentions the message (event details, attempt responses, receipt payloads,
  webhook payloads and their delivery history) has its content keys emptied, its number keys masked, and
  any other string that quotes the number has it masked;
- provider opt-out signals of the message keep their evidence with the number masked (the suppression
  list itself is another table and is never touched: an opt-out outlives the content).

An inbound message (what a recipient sent back, docs/inbound.md) holds content too, with the roles of
the numbers swapped: its ``body`` is the person's text and ``from_number`` the person's number (``to_number``
is ours and stays). Removing it empties the body, masks the contact wherever the row quotes it (its
conversation key, the provider's fields, the action's outcome), and does the same to the parts it was
joined from; its ``message.received`` webhook payloads are scrubbed like any other (``data.body`` emptied,
the contact masked). A pending one (not processed yet) is never touched: the processor still needs it.

Only a message that has left the gateway (``sent``) or is final is touched: before that the send worker
still needs its body and number. Every function is idempotent (a masked number stays as it is) and returns
the rows it changed per table; callers pass ids in batches and each function reads them in chunks of
``CHUNK`` so that no call loads an unbounded amount of data.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, CharField, F, Value, When

from delivery.models import Attempt, OptOutSignal
from inbound.models import InboundMessage, InboundPart, InboundState
from receipts.models import ReceiptEvent, WebhookDelivery
from receipts.webhooks import INBOUND_EVENT
from retention.models import MessageHistory
from scheduling.lifecycle import transitions
from scheduling.models import TERMINAL_STATUSES, Message, MessageEvent, Status
from smsgw.values.phone import mask

# A message's content can go once it has left the gateway: before, the send worker still needs it.
REMOVABLE = frozenset({Status.SENT, *TERMINAL_STATUSES})
# Rows per read: a chunk's messages with their events, attempts, receipts and webhook deliveries stay
# a few megabytes at most (a message has tens of those rows, each a small JSON document).
CHUNK = 200
# History documents are whole messages (timeline, attempts, receipts, webhooks): fewer per read.
HISTORY_CHUNK = 100

# Keys whose value is content (emptied, its type kept); keys whose value is the recipient (masked). The
# names are ours (webhook payloads: data.to, data.metadata) and the providers' (Twilio's To/Body, Vonage's
# msisdn/text). ``from`` is the tenant's sender, not the person's number, and stays.
CONTENT_KEYS = frozenset({"body", "Body", "text", "metadata"})
NUMBER_KEYS = frozenset({"to", "To", "msisdn", "recipient"})

TABLES = (
    "messages",
    "message_events",
    "attempts",
    "receipt_events",
    "webhook_deliveries",
    "opt_out_signals",
)


def masked(number: str) -> str:
    """The form a removed number keeps: its country and a masked rest. A value already masked is
    returned as it is, so a second removal changes nothing."""
    if not number or "*" in number:
        return number
    return mask(number)[:20]


def _forms(numbers: Iterable[str]) -> list[tuple[str, str]]:
    """(as written, masked) for each full number, with and without its ``+`` (Vonage writes none)."""
    out: list[tuple[str, str]] = []
    for number in numbers:
        if not number or "*" in number:
            continue
        hidden = masked(number)
        out.append((number, hidden))
        if number.startswith("+") and len(number) > 4:
            out.append((number[1:], hidden[1:]))
    return out


def scrubbed(value: Any, numbers: Iterable[str] = (), *, content: bool = True) -> Any:
    """``value`` (a JSON document) without content: CONTENT_KEYS emptied (unless ``content`` is False:
    the number only), NUMBER_KEYS masked, and each of ``numbers`` masked wherever a string quotes it."""
    return _scrub(value, _forms(numbers), content)


def _scrub(value: Any, forms: list[tuple[str, str]], content: bool) -> Any:
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if content and key in CONTENT_KEYS:
                out[key] = _empty(item)
            elif key in NUMBER_KEYS and isinstance(item, str):
                out[key] = masked(item)
            else:
                out[key] = _scrub(item, forms, content)
        return out
    if isinstance(value, list):
        return [_scrub(item, forms, content) for item in value]
    if isinstance(value, str):
        for written, hidden in forms:
            if written in value:
                value = value.replace(written, hidden)
        return value
    return value


def _empty(item: Any) -> Any:
    if isinstance(item, dict):
        return {}
    return [] if isinstance(item, list) else ""


def _chunks(ids: Iterable[int], size: int) -> Iterable[list[int]]:
    batch: list[int] = []
    for pk in ids:
        batch.append(pk)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def counts_empty() -> dict[str, int]:
    return dict.fromkeys(TABLES, 0)


# --- live rows ----------------------------------------------------------------------------------------
def messages_content_remove(
    *, message_ids: list[int], now: datetime, actor: str | None = None
) -> dict[str, int]:
    """Remove the content of these live messages (those sent or final; the others are left as they are)
    and of every row that copies it. With ``actor``, each message whose content changed gets a
    ``redacted`` timeline entry naming it. Returns the rows changed per table (TABLES)."""
    return _remove(message_ids, now, actor, content=True)


def messages_address_mask(*, message_ids: list[int], now: datetime) -> dict[str, int]:
    """Mask the number of these live messages (sent or final) and of every row that copies it, and leave
    their body and metadata (Twilio's ``AddressRetention=obfuscate``). Returns rows changed per table."""
    return _remove(message_ids, now, None, content=False)


def _remove(message_ids: list[int], now: datetime, actor: str | None, *, content: bool) -> dict[str, int]:
    counts = counts_empty()
    for chunk in _chunks(dict.fromkeys(message_ids), CHUNK):
        with transaction.atomic():
            numbers = _messages_scrub(chunk, now, counts, actor, content)
            if numbers:
                _related_scrub(numbers, counts, content)
    return counts


def _messages_scrub(
    chunk: list[int], now: datetime, counts: dict[str, int], actor: str | None, content: bool
) -> dict[int, str]:
    """The messages' own columns, in one compare-and-set UPDATE (the status must still be REMOVABLE, so a
    message the send worker took back in the meantime keeps what it needs). Returns {id: the number as
    it was} of the messages found removable, whose related rows are scrubbed next."""
    rows = list(
        Message.objects.filter(pk__in=chunk, status__in=REMOVABLE).values_list(
            "pk", "to", "body", "metadata", "campaign_key"
        )
    )
    numbers = {row[0]: row[1] for row in rows}
    changed = {
        pk: masked(to)
        for pk, to, body, metadata, key in rows
        if (content and (body or metadata)) or masked(to) != to or (key or "").startswith("+")
    }
    if not changed:
        return numbers
    # A campaign recipient's key is its number (scheduling.campaigns: one message per number): it becomes
    # the message's own id, unique in its campaign as the key must be (two masked numbers may be equal).
    keys = [When(pk=pk, campaign_key__startswith="+", then=Value(f"erased:{pk}")) for pk in changed]
    columns: dict[str, Any] = {"body": "", "metadata": {}} if content else {}
    updated = Message.objects.filter(pk__in=list(changed), status__in=REMOVABLE).update(
        to=Case(*(When(pk=pk, then=Value(to)) for pk, to in changed.items()), output_field=CharField()),
        campaign_key=Case(*keys, default=F("campaign_key"), output_field=CharField()),
        updated_at=now,
        **columns,
    )
    counts["messages"] += updated
    if actor and updated:
        # Inside the UPDATE's transaction the rows it changed are locked: the re-read names exactly them.
        done = Message.objects.filter(pk__in=list(changed), to__contains="*", status__in=REMOVABLE)
        entries: list[tuple[int, str, str, dict]] = [
            (pk, "redacted", status, {}) for pk, status in done.values_list("pk", "status")
        ]
        transitions.events_record_many(entries, actor=actor, now=now)
    return numbers


def _related_scrub(numbers: dict[int, str], counts: dict[str, int], content: bool) -> None:
    """Every row that copies the messages' content: their JSON scrubbed of content keys and the numbers."""
    ids = list(numbers)
    for table, qs, columns in (
        ("message_events", MessageEvent.objects.filter(message_id__in=ids), ("details",)),
        ("attempts", Attempt.objects.filter(message_id__in=ids), ("response",)),
        ("receipt_events", ReceiptEvent.objects.filter(message_id__in=ids), ("payload",)),
        ("webhook_deliveries", WebhookDelivery.objects.filter(message_id__in=ids), ("payload", "history")),
    ):
        counts[table] += _json_scrub(qs, columns, numbers, content)
    signals = OptOutSignal.objects.filter(message_id__in=ids).exclude(to__contains="*")
    for pk, to in signals.values_list("pk", "to"):
        counts["opt_out_signals"] += OptOutSignal.objects.filter(pk=pk).update(to=masked(to))


def _json_scrub(qs, columns: tuple[str, ...], numbers: dict[int, str], content: bool) -> int:
    """Scrub ``columns`` of the rows of ``qs`` (each row's own message's number, by ``message_id``);
    write back only the rows that changed. Returns how many did."""
    changed = []
    for row in qs.only("pk", "message_id", *columns).iterator(chunk_size=500):
        forms = [numbers[row.message_id]] if row.message_id in numbers else []
        dirty = False
        for column in columns:
            before = getattr(row, column)
            after = scrubbed(before, forms, content=content)
            if after != before:
                setattr(row, column, after)
                dirty = True
        if dirty:
            changed.append(row)
    if changed:
        qs.model.objects.bulk_update(changed, list(columns), batch_size=500)
    return len(changed)


# --- history rows -------------------------------------------------------------------------------------
def history_content_remove(*, ids: list[int], now: datetime, actor: str | None = None) -> dict[str, int]:
    """Remove the content of these MessageHistory rows: ``to`` masked, the document scrubbed as the live
    rows are (message, events, attempts, receipts, webhooks), ``redact_on`` emptied (nothing more is due).
    With ``actor``, a changed document gets a ``redacted`` entry in its timeline. Returns
    ``{"message_history": rows changed}``."""
    changed_total = 0
    for chunk in _chunks(dict.fromkeys(ids), HISTORY_CHUNK):
        with transaction.atomic():
            changed = []
            rows = MessageHistory.objects.filter(pk__in=chunk).only("pk", "to", "document", "redact_on")
            for row in rows:
                document = history_document_scrubbed(row.document, row.to, now=now, actor=actor)
                to = masked(row.to)
                if document != row.document or to != row.to or row.redact_on is not None:
                    row.document, row.to, row.redact_on = document, to, None
                    changed.append(row)
            if changed:
                MessageHistory.objects.bulk_update(changed, ["document", "to", "redact_on"])
            changed_total += len(changed)
    return {"message_history": changed_total}


def history_document_scrubbed(
    document: dict[str, Any], number: str, *, now: datetime, actor: str | None = None
) -> dict[str, Any]:
    """A history document (retention.history) without content; its timeline gains a ``redacted`` entry
    when ``actor`` is given and something was removed."""
    message = document.get("message") or {}
    if "*" in number and isinstance(message, dict):  # the column masked already; the document may not be
        number = str(message.get("to") or number)
    # The message's own columns are content keys (body, metadata) and a number key (to), as in any payload.
    out = scrubbed(document, [number])
    message = out.get("message") or {}
    if actor and out != document:
        out["events"] = [
            *(out.get("events") or []),
            {
                "kind": "redacted",
                "from_status": str(message.get("status", "")),
                "to_status": str(message.get("status", "")),
                "actor": actor,
                "details": {},
                "created_at": now.isoformat(),
            },
        ]
    return out


# --- inbound rows -------------------------------------------------------------------------------------
INBOUND_TABLES = ("inbound_messages", "inbound_parts")


def inbound_content_remove(*, inbound_ids: list[int]) -> dict[str, int]:
    """Remove the content of these inbound messages (those processed; a pending one is left as it is) and
    of the parts they were joined from: body emptied, the contact masked wherever the rows quote it.
    Their ``message.received`` webhooks are another pass (``inbound_webhooks_scrub``): a delivery names
    no inbound row. Returns the rows changed per table (INBOUND_TABLES)."""
    counts = dict.fromkeys(INBOUND_TABLES, 0)
    columns = ("body", "from_number", "conversation", "payload", "action_result")
    for chunk in _chunks(dict.fromkeys(inbound_ids), CHUNK):
        with transaction.atomic():
            rows = InboundMessage.objects.filter(pk__in=chunk).exclude(state=InboundState.PENDING)
            changed, contacts = [], {}
            for row in rows.only("pk", *columns):
                contacts[row.pk] = row.from_number
                before = [getattr(row, c) for c in columns]
                row.body, row.from_number = "", masked(row.from_number)
                row.conversation = scrubbed(row.conversation, [contacts[row.pk]])
                row.payload = scrubbed(row.payload, [contacts[row.pk]])
                row.action_result = scrubbed(row.action_result, [contacts[row.pk]], content=False)
                if [getattr(row, c) for c in columns] != before:
                    changed.append(row)
            InboundMessage.objects.bulk_update(changed, list(columns), batch_size=500)
            counts["inbound_messages"] += len(changed)
            counts["inbound_parts"] += _parts_scrub(contacts)
    return counts


def _parts_scrub(contacts: dict[int, str]) -> int:
    """The parts of these joined messages ({message id: its contact}); a part keeps the number as the
    provider wrote it (Vonage: no ``+``), masked in that form."""
    changed = []
    parts = InboundPart.objects.filter(message_id__in=list(contacts)).only(
        "pk", "message_id", "body", "from_number", "payload"
    )
    for part in parts:
        forms = [contacts.get(part.message_id or 0, ""), part.from_number]
        after = ("", masked(part.from_number), scrubbed(part.payload, forms))
        if after != (part.body, part.from_number, part.payload):
            part.body, part.from_number, part.payload = after
            changed.append(part)
    InboundPart.objects.bulk_update(changed, ["body", "from_number", "payload"], batch_size=500)
    return len(changed)


def inbound_webhooks_scrub(*, delivery_ids: list[int]) -> dict[str, int]:
    """Scrub these ``message.received`` deliveries (payload and attempt history): ``data.body`` emptied
    and the contact (``data.from``) masked wherever quoted. Returns ``{"webhook_deliveries": changed}``."""
    changed_total = 0
    for chunk in _chunks(dict.fromkeys(delivery_ids), CHUNK):
        with transaction.atomic():
            changed = []
            rows = WebhookDelivery.objects.filter(pk__in=chunk, event_type=INBOUND_EVENT)
            for row in rows.only("pk", "payload", "history"):
                data = (row.payload or {}).get("data") or {}
                contact = str(data.get("from") or "") if isinstance(data, dict) else ""
                payload = scrubbed(row.payload, [contact])
                if isinstance(payload.get("data"), dict):
                    # data.to is our receiving number, not the person's: it stays.
                    if contact:
                        payload["data"]["from"] = masked(contact)
                    if "to" in data:
                        payload["data"]["to"] = data["to"]
                history = scrubbed(row.history, [contact])
                if (payload, history) != (row.payload, row.history):
                    row.payload, row.history = payload, history
                    changed.append(row)
            WebhookDelivery.objects.bulk_update(changed, ["payload", "history"], batch_size=500)
            changed_total += len(changed)
    return {"webhook_deliveries": changed_total}
