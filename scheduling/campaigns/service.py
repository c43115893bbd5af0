"""Accepting a campaign (docs/campaigns.md): everything request-level is checked here, synchronously,
and a bad value is a 400 naming its field with nothing stored. The recipient list is then stored as
received in CampaignUpload chunks and the campaign in ``creating``; the creation job
(``scheduling.campaign_make``, a Celery task published after commit) makes the messages.

Time modes (Campaign.time_mode):
  now             no send_at: each message is due when it is made;
  instant         send_at with an offset (or Z): that instant for everyone;
  local           send_at without an offset: that wall time in ``timezone`` (default: the tenant's);
  recipient_local time_mode "recipient_local": that wall time in each recipient's own zone (the row's
                  ``timezone``, else the number's single zone, else ``timezone`` as the default).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.campaigns.rows import (
    MAX_COLUMNS,
    RECIPIENT,
    RECIPIENT_ALIAS,
    TemplateError,
    csv_records,
    decoded_lines,
    header_check,
    template_parse,
)
from scheduling.dispatch import quiet
from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.limits import quotas
from scheduling.messages import service as services
from scheduling.models import Campaign, CampaignTimeMode, CampaignUpload, Priority
from smsgw.channels import DEFAULT_CHANNEL
from smsgw.domain_errors import IdempotencyMismatch, InvalidInput, NotFoundError
from smsgw.models import Tenant
from smsgw.tenancy.priority import priority_for
from smsgw.values.timeutil import (
    DstPolicy,
    TimeResolutionError,
    check_window,
    parse_timezone,
    resolve_send_at,
)

# Bytes per stored chunk of the recipient list: the web process holds one while storing it and the
# creation job one while reading it back, whatever the file's size.
UPLOAD_CHUNK_BYTES = 1024 * 1024
# A local time is the same instant in no two zones; UTC-12 to UTC+14 puts every recipient's instant
# within 26 hours of the default zone's. Each recipient's own instant is checked when it is made.
RECIPIENT_LOCAL_SPREAD = timedelta(hours=26)


def source_aliases(source: Source) -> list[str]:
    """The deprecated names an accepted recipient list uses (``phone``), for the answer's Deprecation
    headers: a JSON item's key, or the CSV header's column."""
    if source.upload is not None:
        first = next(csv_records(decoded_lines(source.upload.chunks(64 * 1024))), (1, None))
        source.upload.seek(0)
        names = {h.strip() for h in first[1] or []}
    else:
        names = {k for row in source.rows or [] if isinstance(row, dict) for k in row}
    return [RECIPIENT_ALIAS] if RECIPIENT_ALIAS in names else []


@dataclass(frozen=True)
class Source:
    """The recipient list: a parsed JSON array or an uploaded CSV file (a Django UploadedFile)."""

    rows: list | None = None
    upload: Any = None


def campaign_get(*, tenant: Tenant, public_id: str) -> Campaign:
    # Tenant in the filter: another tenant's campaign is simply not found.
    campaign = Campaign.objects.filter(tenant=tenant, public_id=public_id).first()
    if campaign is None:
        raise NotFoundError("No campaign with this id.")
    return campaign


def campaign_create(
    *, tenant: Tenant, actor: str, data: dict[str, Any], source: Source, idempotency_key: str | None = None
) -> tuple[Campaign, bool]:
    """Validate and store a campaign and its recipient list; publish its creation job after commit.
    Returns (campaign, created); created is False for an idempotent repeat."""
    if idempotency_key:
        existing = Campaign.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, _fingerprint(data, source)), False
    now = timezone.now()
    values = _definition(tenant, data, now)
    columns = _source_columns(source, values["variables"])
    campaign = Campaign(
        tenant=tenant,
        created_by=actor[:64],
        idempotency_key=idempotency_key or None,
        source_format="csv" if source.upload is not None else "json",
        **values,
    )
    try:
        with transaction.atomic():
            if quotas.has_quota(tenant):
                _quota_open(tenant, _first_due(campaign, now), now)
            campaign.save()
            digest, size = _store(campaign, source, columns)
            campaign.request_fingerprint = _fingerprint(data, source, digest)
            campaign.source_bytes = size
            Campaign.objects.filter(pk=campaign.pk).update(
                request_fingerprint=campaign.request_fingerprint, source_bytes=size
            )
            transaction.on_commit(lambda: campaign_make_enqueue(campaign.pk))
    except IntegrityError:
        if not idempotency_key:
            raise
        # Two requests with the same key raced; the other one committed first.
        existing = Campaign.objects.get(tenant=tenant, idempotency_key=idempotency_key)
        return _replay(existing, _fingerprint(data, source)), False
    return campaign, True


def campaign_make_enqueue(campaign_id: int) -> None:
    """Publish the creation job. Also the way to continue one that stopped because its campaign was
    paused while creating (resume): it starts again from its checkpoint."""
    from scheduling.tasks import campaign_make

    campaign_make.delay(campaign_id)


def campaign_range_enqueue(campaign_id: int, range_index: int) -> None:
    """Publish the job of one line range of the campaign (scheduling.campaigns.make)."""
    from scheduling.tasks import campaign_make

    campaign_make.delay(campaign_id, range_index)


def _definition(tenant: Tenant, data: dict[str, Any], now: datetime) -> dict[str, Any]:
    body, is_template = data.get("body"), "template" in data
    if is_template == ("body" in data):
        raise InvalidInput("body", "give either body or template (with {variable} placeholders)")
    text = data["template"] if is_template else body
    if not text or not text.strip():
        raise InvalidInput("template" if is_template else "body", "must not be empty")
    try:
        template = template_parse(text, is_template=is_template)
    except TemplateError as exc:
        raise InvalidInput("template", str(exc)) from exc
    literal = "".join(template.parts[0::2])
    segments = DEFAULT_CHANNEL.cost(literal).units
    if segments > settings.MAX_SEGMENTS:
        raise InvalidInput(
            "template" if is_template else "body",
            f"needs {segments} segments before any variable is filled in; "
            f"the limit is {settings.MAX_SEGMENTS}",
        )
    if len(template.variables) > MAX_COLUMNS - 2:
        raise InvalidInput("template", f"uses more than {MAX_COLUMNS - 2} variables")
    from_number, pool = services._sender(tenant, data.get("from"), data.get(SENDER_POOL_FIELD))
    mode, tz_name, policy = _time(tenant, data, now)
    try:
        override = quiet.parse_override(data.get("quiet_hours"))
    except quiet.QuietHoursError as exc:
        raise InvalidInput(exc.field, str(exc)) from exc
    return {
        "name": data.get("name") or "",
        "body": text,
        "is_template": is_template,
        "variables": template.variables,
        "from_number": from_number,
        "sender_pool": pool,
        "priority": priority_for(tenant, data.get("priority"), default=Priority.BULK),
        "validity_seconds": data.get("validity_seconds") or settings.DEFAULT_VALIDITY_SECONDS,
        "metadata": data.get("metadata") or {},
        "time_mode": mode,
        "requested_send_at": data.get("send_at") or "",
        "timezone": tz_name,
        "dst_policy": policy,
        "quiet_hours": override or {},
        "allow_duplicates": bool(data.get("allow_duplicates")),
    }


def _time(tenant: Tenant, data: dict[str, Any], now: datetime) -> tuple[str, str, str]:
    send_at, tz_given, asked = data.get("send_at"), data.get("timezone"), data.get("time_mode")
    policy = data.get("dst_policy") or DstPolicy.EARLIER.value
    default_zone = tz_given or tenant.default_timezone or "UTC"
    if not send_at:
        if asked not in (None, CampaignTimeMode.NOW):
            raise InvalidInput("send_at", f"time_mode {asked!r} needs a send_at")
        if tz_given:
            _zone(tz_given)
        return CampaignTimeMode.NOW, tz_given or "", policy
    if asked == CampaignTimeMode.RECIPIENT_LOCAL:
        try:
            resolved = resolve_send_at(send_at, default_zone, policy, default_zone)
            if resolved.local_time is None:
                raise TimeResolutionError(
                    "send_at", "a recipient_local send_at is a local wall time without an offset"
                )
            check_window(
                resolved.due_at,
                now=now,
                past_tolerance_seconds=RECIPIENT_LOCAL_SPREAD.total_seconds(),
                max_ahead_days=settings.MAX_SCHEDULE_AHEAD_DAYS,
            )
        except TimeResolutionError as exc:
            raise InvalidInput(exc.field, str(exc), reason=exc.code) from exc
        return CampaignTimeMode.RECIPIENT_LOCAL, default_zone, policy
    resolved, _ = services._time(tenant, send_at, tz_given, policy, now)
    mode = CampaignTimeMode.INSTANT if resolved.local_time is None else CampaignTimeMode.LOCAL
    if asked not in (None, mode):
        raise InvalidInput(
            "send_at",
            f"this send_at is {'an instant' if mode == CampaignTimeMode.INSTANT else 'a local time'}, "
            f"not time_mode {asked!r}",
        )
    return mode, (resolved.timezone if mode == CampaignTimeMode.LOCAL else tz_given or ""), policy


def _zone(name: str) -> None:
    try:
        parse_timezone(name)
    except TimeResolutionError as exc:
        raise InvalidInput("timezone", str(exc), reason=exc.code) from exc


def _first_due(campaign: Campaign, now: datetime) -> datetime:
    """The instant the acceptance check books against (roughly where most messages will be due)."""
    if campaign.time_mode == CampaignTimeMode.NOW or not campaign.requested_send_at:
        return now
    zone = campaign.timezone or "UTC"
    return max(now, resolve_send_at(campaign.requested_send_at, zone, campaign.dst_policy, zone).due_at)


def _quota_open(tenant: Tenant, due_at: datetime, now: datetime) -> None:
    """The acceptance check of one message (429 quota_exceeded when the tenant could not take even one
    more), undone at once: a campaign's messages are booked as they are made (scheduling.messages.birth)."""
    savepoint = transaction.savepoint_create()
    try:
        quotas.acceptance_check(tenant=tenant, due_at=due_at, segments=1, now=now)
    finally:
        transaction.savepoint_rollback(savepoint)


def _source_columns(source: Source, variables: list[str]) -> list[str]:
    """The recipient list's columns, checked against the template; a 400 naming ``recipients``."""
    if source.upload is not None:
        first = next(csv_records(decoded_lines(source.upload.chunks(64 * 1024))), (1, None))
        source.upload.seek(0)
        try:
            return header_check(first[1], variables)
        except ValueError as exc:
            raise InvalidInput("recipients", str(exc)) from exc
    return _json_columns(source.rows)


def _json_columns(rows: Any) -> list[str]:
    """A JSON array's columns: the recipient's (``to``, or ``phone`` for a list that uses only that
    alias), ``timezone`` and every other key, a variable, in order of appearance."""
    if not isinstance(rows, list) or not rows:
        raise InvalidInput("recipients", "must be a non-empty array of objects, or an uploaded CSV file")
    columns = ["", "timezone"]  # the recipient's column first, named below
    seen = {RECIPIENT, RECIPIENT_ALIAS, "timezone"}
    uses_to = False
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InvalidInput("recipients", f"item {i + 1} is not an object")
        for key, value in row.items():
            if value is not None and (not isinstance(value, str | int | float) or isinstance(value, bool)):
                raise InvalidInput("recipients", f"item {i + 1}: {key!r} must be a string or a number")
            if key not in seen:
                if not key or len(key) > 64 or "\n" in key or "\r" in key:
                    raise InvalidInput("recipients", f"item {i + 1}: keys are names of 1-64 characters")
                seen.add(key)
                columns.append(key)
                if len(columns) > MAX_COLUMNS:
                    raise InvalidInput("recipients", f"more than {MAX_COLUMNS} distinct keys")
        to, alias = row.get(RECIPIENT), row.get(RECIPIENT_ALIAS)
        if to is not None:
            uses_to = True
            if alias is not None and str(alias).strip() != str(to).strip():
                raise InvalidInput(
                    "recipients",
                    f"item {i + 1}: 'to' and 'phone' (its deprecated alias) differ; give 'to' alone",
                )
    # Stored under the name the list used, so that its error rows name the field the client wrote: `phone`
    # for a list written before `to`, else `to`.
    columns[0] = RECIPIENT if uses_to else RECIPIENT_ALIAS
    return columns


def _store(campaign: Campaign, source: Source, columns: list[str]) -> tuple[str, int]:
    """Write the recipient list in UPLOAD_CHUNK_BYTES chunks; returns (sha256 hex, bytes). A JSON array
    is re-encoded as CSV (header = its keys) so the job reads one format."""
    digest = hashlib.sha256()
    size = 0
    for seq, data in enumerate(_source_bytes(source, columns)):
        digest.update(data)
        size += len(data)
        CampaignUpload.objects.create(campaign=campaign, seq=seq, data=data)
    return digest.hexdigest(), size


def _source_bytes(source: Source, columns: list[str]):
    if source.upload is not None:
        buffer = bytearray()
        for piece in source.upload.chunks(UPLOAD_CHUNK_BYTES):
            buffer += piece
            while len(buffer) >= UPLOAD_CHUNK_BYTES:
                yield bytes(buffer[:UPLOAD_CHUNK_BYTES])
                del buffer[:UPLOAD_CHUNK_BYTES]
        if buffer:
            yield bytes(buffer)
        return
    import csv
    import io

    assert source.rows is not None  # _source_columns refused a source with neither upload nor rows
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    rest = columns[1:]
    for row in source.rows:
        # `to`, else `phone` (_source_columns refused an item where both are given and differ).
        to = row.get(RECIPIENT)
        if to is None:
            to = row.get(RECIPIENT_ALIAS)
        writer.writerow(
            ["" if to is None else str(to), *("" if row.get(c) is None else str(row.get(c)) for c in rest)]
        )
        if out.tell() >= UPLOAD_CHUNK_BYTES:
            yield out.getvalue().encode()
            out.seek(0)
            out.truncate()
    if out.tell():
        yield out.getvalue().encode()


def _fingerprint(data: dict[str, Any], source: Source, digest: str | None = None) -> str:
    """The request's fields and its recipient list: a JSON array by its canonical JSON (key order does
    not matter), a CSV file by its bytes (``digest`` when it was just computed while storing them)."""
    if source.upload is None:
        digest = hashlib.sha256(json.dumps(source.rows, sort_keys=True, default=str).encode()).hexdigest()
    elif digest is None:
        hasher = hashlib.sha256()
        for piece in source.upload.chunks(UPLOAD_CHUNK_BYTES):
            hasher.update(piece)
        source.upload.seek(0)
        digest = hasher.hexdigest()
    fields = {k: v for k, v in data.items() if k != "recipients"}
    return hashlib.sha256(json.dumps([fields, digest], sort_keys=True, default=str).encode()).hexdigest()


def _replay(existing: Campaign, fingerprint: str) -> Campaign:
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyMismatch(
            "This Idempotency-Key was already used with a different request; "
            "use a new key for a different campaign."
        )
    return existing
