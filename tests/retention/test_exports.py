"""Daily exports (retention.exports): what a day's file holds, from the live table and from history, with
content only inside the tenant's content horizon; one tenant's file never holds another's messages; a run
killed mid-write leaves no Export row and the next run writes the day whole; expired exports go with their
files, audited; a repeat run writes nothing new. Both halves (PostgreSQL and SQLite)."""

from __future__ import annotations

import gzip
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import storages
from django.utils import timezone

from retention import export_lines, exports
from retention.models import Export, RetentionAction, RetentionAudit, TenantRetention
from scheduling.models import Message, Status
from tests.factories import SENDER, message, tenant_with_key
from tests.retention.exporting import (
    DAY,
    NOW,
    at,
    files_in_storage,
    finished,
    lines_of,
    move_to_history,
)

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite, pytest.mark.usefixtures("export_storage")]

OTHER = "+14155550177"


@pytest.fixture
def moved_after_an_hour(settings):
    """Messages leave for history an hour after they are final: DAY's can be there at NOW (with the
    default 48 hours nothing of DAY has moved yet, and history is not read for it)."""
    settings.HISTORY_AFTER_HOURS = 1


def line(msg: Message, *, status: str, finished_at: str, content: bool, **changes) -> dict:
    """The line of a message made by tests.retention.exporting.finished, as docs/exports.md shows it."""
    sent = status in (Status.DELIVERED, Status.UNDELIVERED)
    expected = {
        "id": msg.public_id,
        "status": status,
        "reason_code": "",
        "status_reason": "",
        "error_code": "30003" if status == Status.UNDELIVERED else "",
        "created_at": None,
        "requested_send_at": None,
        "requested_timezone": None,
        "due_at": None,
        "sent_at": None,
        "delivered_at": None,
        "finished_at": finished_at,
        "provider": msg.provider,
        "provider_message_id": f"SM{msg.pk:032d}" if sent else None,
        "provider_status": status if sent else "",
        "route": {
            "name": "default",
            "leg": 0,
            "legs": [{"provider": msg.provider, "account": "", "sender": SENDER}],
        },
        "from": SENDER,
        "messaging_service_sid": "",
        "encoding": "GSM-7",
        "segments": 1,
        "attempts": 1,
        "content": content,
        "to": msg.to if content else None,
        "body": msg.body if content else None,
        "metadata": {"order": "A-1"} if content else None,
    }
    return expected | changes


@pytest.mark.usefixtures("moved_after_an_hour")
def test_a_day_holds_its_final_messages_from_both_tables_with_content_only_inside_the_horizon():
    acme, _ = tenant_with_key("acme")
    TenantRetention.objects.create(tenant=acme, content_days=1)
    # Final at 01:00: 29 hours before the run, past the one-day content horizon.
    early = finished(acme, at(DAY, 1), body="early one")
    # Final at 23:00: 7 hours before the run, inside it.
    late = finished(acme, at(DAY, 23), status=Status.UNDELIVERED, to=OTHER, body="late one")
    # Moved to history with its content kept until tomorrow, and one whose content was removed already.
    kept = finished(acme, at(DAY, 22), status=Status.CANCELLED, body="kept in history")
    move_to_history(kept, redact_on=DAY + timedelta(days=2))
    removed = finished(acme, at(DAY, 21), status=Status.EXPIRED, body="removed in history")
    move_to_history(removed, redact_on=None)
    # Not in this day's file: the day before (its own file), a message still waiting, a deleted one.
    before = finished(acme, at(DAY - timedelta(days=1), 23, 59), body="the day before")
    waiting = message(acme, due_in=3600)
    deleted = finished(acme, at(DAY, 12))
    Message.objects.filter(pk=deleted.pk).update(deleted_at=at(DAY, 13))

    result = exports.exports_run(now=NOW)

    assert result == {"written": 2, "rows": 5, "tenants": 1, "failed": 0, "pruned": 0}
    older, export = Export.objects.filter(tenant=acme).order_by("day")
    assert (older.day, older.rows, export.day, export.rows) == (DAY - timedelta(days=1), 1, DAY, 4)
    assert lines_of(older) == [
        line(
            before,
            status=Status.DELIVERED,
            finished_at="2026-12-03T23:59:00Z",
            content=False,
            created_at="2026-12-03T22:59:00Z",
            due_at="2026-12-03T23:57:00Z",
            sent_at="2026-12-03T23:58:00Z",
            delivered_at="2026-12-03T23:59:00Z",
        )
    ]
    assert lines_of(export) == [
        line(
            early,
            status=Status.DELIVERED,
            finished_at="2026-12-04T01:00:00Z",
            content=False,
            created_at="2026-12-04T00:00:00Z",
            due_at="2026-12-04T00:58:00Z",
            sent_at="2026-12-04T00:59:00Z",
            delivered_at="2026-12-04T01:00:00Z",
        ),
        line(
            late,
            status=Status.UNDELIVERED,
            finished_at="2026-12-04T23:00:00Z",
            content=True,
            created_at="2026-12-04T22:00:00Z",
            due_at="2026-12-04T22:58:00Z",
            sent_at="2026-12-04T22:59:00Z",
        ),
        line(
            kept,
            status=Status.CANCELLED,
            finished_at="2026-12-04T22:00:00Z",
            content=True,
            created_at="2026-12-04T21:00:00Z",
            due_at="2026-12-04T21:58:00Z",
        ),
        line(
            removed,
            status=Status.EXPIRED,
            finished_at="2026-12-04T21:00:00Z",
            content=False,
            created_at="2026-12-04T20:00:00Z",
            due_at="2026-12-04T20:58:00Z",
        ),
    ]
    with storages["exports"].open(export.name, "rb") as f:
        raw = f.read()
    assert export.size == len(raw) and len(export.sha256) == 64
    assert export.expires_at == NOW + timedelta(days=30) and export.created_at == NOW
    assert export.name == f"tenant-{acme.pk}/2026-12-04/{export.public_id}.jsonl.gz"
    # Nothing was touched: the waiting message is still waiting, the live ones still live.
    assert Message.objects.get(pk=waiting.pk).status == Status.SCHEDULED
    assert set(Message.objects.values_list("pk", flat=True)) == {
        early.pk,
        late.pk,
        before.pk,
        waiting.pk,
        deleted.pk,
    }


@pytest.mark.usefixtures("moved_after_an_hour")
def test_an_export_never_holds_another_tenants_messages():
    acme, _ = tenant_with_key("acme")
    globex, _ = tenant_with_key("globex")
    ours = [finished(acme, at(DAY, h)) for h in (3, 9)]
    theirs = [finished(globex, at(DAY, h), body="theirs") for h in (4, 10)]
    move_to_history(theirs[1], redact_on=DAY + timedelta(days=10))

    exports.exports_run(now=NOW)

    mine, other = Export.objects.get(tenant=acme), Export.objects.get(tenant=globex)
    assert [x["id"] for x in lines_of(mine)] == [m.public_id for m in ours]
    assert [x["id"] for x in lines_of(other)] == [m.public_id for m in theirs]
    assert mine.name.startswith(f"tenant-{acme.pk}/") and other.name.startswith(f"tenant-{globex.pk}/")


def test_a_repeat_run_writes_nothing_new():
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY, 8))
    first = exports.exports_run(now=NOW)
    files = files_in_storage()

    again = exports.exports_run(now=NOW + timedelta(minutes=5))

    assert first["written"] == 1 and again == {
        "written": 0,
        "rows": 0,
        "tenants": 0,
        "failed": 0,
        "pruned": 0,
    }
    assert Export.objects.count() == 1 and files_in_storage() == files


def test_a_day_without_final_messages_is_an_empty_file():
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY - timedelta(days=1), 8))
    finished(acme, at(DAY + timedelta(days=1), 2))  # today, at the run: not over yet

    exports.exports_run(now=NOW + timedelta(days=-1, hours=1))  # the day after DAY - 1 ...
    exports.exports_run(now=NOW + timedelta(days=1))  # ... and two days later

    days = list(Export.objects.order_by("day").values_list("day", "rows"))
    assert days == [(DAY - timedelta(days=1), 1), (DAY, 0), (DAY + timedelta(days=1), 1)]
    empty = Export.objects.get(day=DAY)
    with storages["exports"].open(empty.name, "rb") as f:
        assert gzip.decompress(f.read()) == b""


def test_a_day_is_written_only_an_hour_after_it_ended():
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY, 23, 50))

    assert exports.exports_run(now=at(DAY + timedelta(days=1), 0, 30))["written"] == 0
    assert exports.exports_run(now=at(DAY + timedelta(days=1), 1, 30))["written"] == 1


class Killed(BaseException):
    """A kill: not an Exception, so nothing on the way catches it."""


def test_a_run_killed_while_writing_leaves_no_export_and_the_next_run_writes_the_day_whole(monkeypatch):
    acme, _ = tenant_with_key("acme")
    sent = [finished(acme, at(DAY, h)) for h in (2, 3, 4)]
    real = exports.export_line
    calls = []

    def dies_on_the_second_line(row, *, content):
        calls.append(row.id)
        if len(calls) == 2:
            raise Killed
        return real(row, content=content)

    monkeypatch.setattr(exports, "export_line", dies_on_the_second_line)
    with pytest.raises(Killed):
        exports.exports_run(now=NOW)
    assert Export.objects.count() == 0 and files_in_storage() == []

    monkeypatch.setattr(exports, "export_line", real)
    assert exports.exports_run(now=NOW)["written"] == 1
    export = Export.objects.get()
    assert [x["id"] for x in lines_of(export)] == [m.public_id for m in sent]


def test_a_run_killed_after_saving_the_file_leaves_no_export_and_the_retry_removes_its_file(monkeypatch):
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY, 2))

    def killed(**kwargs):
        raise Killed

    monkeypatch.setattr(Export.objects, "create", killed)
    with pytest.raises(Killed):
        exports.exports_run(now=NOW)
    assert Export.objects.count() == 0
    (orphan,) = files_in_storage()

    monkeypatch.undo()
    exports.exports_run(now=NOW)

    export = Export.objects.get()
    assert files_in_storage() == [export.name] and export.name != orphan and export.rows == 1


def test_a_run_that_loses_the_day_to_another_run_removes_its_own_file(monkeypatch):
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY, 2))
    winner = exports.export_write(tenant=acme, day=DAY, now=NOW)

    assert exports.export_write(tenant=acme, day=DAY, now=NOW) is None

    assert winner is not None and files_in_storage() == [winner.name]
    assert list(Export.objects.all()) == [winner]


def test_expired_exports_are_removed_with_their_files_and_audited(export_storage):
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY - timedelta(days=1), 2))
    finished(acme, at(DAY, 2))
    exports.exports_run(now=NOW - timedelta(days=1))  # DAY - 1, written a day earlier
    exports.exports_run(now=NOW)  # DAY
    old, new = Export.objects.order_by("day")

    assert exports.exports_prune(now=old.expires_at) == 1

    assert list(Export.objects.all()) == [new]
    assert files_in_storage() == [new.name]
    assert not (export_storage / f"tenant-{acme.pk}" / old.day.isoformat()).exists()
    audit = RetentionAudit.objects.get()
    assert (audit.tenant_id, audit.action, audit.actor, audit.subject) == (
        acme.pk,
        RetentionAction.EXPORT_PRUNE,
        "retention",
        old.public_id,
    )
    assert audit.counts == {"exports": 1, "files": 1, "rows": 1} and audit.created_at == old.expires_at


def test_the_first_export_reaches_back_at_most_the_keep_time(settings):
    settings.EXPORT_KEEP_DAYS = 3
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY - timedelta(days=10), 2))  # older than the keep time: never exported
    finished(acme, at(DAY - timedelta(days=2), 2))

    exports.exports_run(now=NOW)

    days = list(Export.objects.order_by("day").values_list("day", "rows"))
    assert days == [(DAY - timedelta(days=2), 1), (DAY - timedelta(days=1), 0), (DAY, 0)]


def test_a_run_writes_at_most_its_budget_taking_tenants_in_turn():
    acme, _ = tenant_with_key("acme")
    globex, _ = tenant_with_key("globex")
    for tenant in (acme, globex):
        for back in (2, 1, 0):
            finished(tenant, at(DAY - timedelta(days=back), 2))

    assert exports.exports_run(now=NOW, max_days=4)["written"] == 4

    written = sorted(Export.objects.values_list("tenant_id", "day"))
    first, second = DAY - timedelta(days=2), DAY - timedelta(days=1)
    assert written == sorted([(acme.pk, first), (acme.pk, second), (globex.pk, first), (globex.pk, second)])
    assert exports.exports_run(now=NOW)["written"] == 2


@pytest.mark.usefixtures("moved_after_an_hour")
def test_a_message_moved_while_the_day_is_read_is_in_the_file_once(monkeypatch):
    """Read in chunks of two: the live table gives the first two, then two messages move to history
    (one already read, one not) before history is read; each is in the file once."""
    acme, _ = tenant_with_key("acme")
    sent = [finished(acme, at(DAY, h)) for h in (1, 2, 3, 4, 5)]
    real = export_lines._history
    moved = []

    def history_after_a_move(*args):
        if not moved:
            moved.extend([sent[0].pk, sent[2].pk])
            move_to_history(sent[0], redact_on=DAY + timedelta(days=30))
            move_to_history(sent[2], redact_on=DAY + timedelta(days=30))
        return real(*args)

    monkeypatch.setattr(export_lines, "_history", history_after_a_move)
    rows = list(export_lines.finished_messages(tenant_id=acme.pk, day=DAY, now=NOW, chunk=2))

    assert [r.id for r in rows] == [m.pk for m in sent]
    assert moved == [sent[0].pk, sent[2].pk]


def test_the_export_storage_options_must_be_a_json_object(monkeypatch):
    from smsgw.config.env import env_json_object

    monkeypatch.setenv("SMSGW_EXPORT_STORAGE_OPTIONS", '{"bucket_name": "x"')
    with pytest.raises(ImproperlyConfigured, match="SMSGW_EXPORT_STORAGE_OPTIONS must be a JSON object"):
        env_json_object("SMSGW_EXPORT_STORAGE_OPTIONS")
    monkeypatch.setenv("SMSGW_EXPORT_STORAGE_OPTIONS", '["x"]')
    with pytest.raises(ImproperlyConfigured, match="got list"):
        env_json_object("SMSGW_EXPORT_STORAGE_OPTIONS")
    monkeypatch.setenv("SMSGW_EXPORT_STORAGE_OPTIONS", '{"bucket_name": "x"}')
    assert env_json_object("SMSGW_EXPORT_STORAGE_OPTIONS") == {"bucket_name": "x"}


def test_history_is_not_read_for_a_day_whose_messages_cannot_have_moved_yet(monkeypatch):
    """With the move 48 hours after a message is final, a day under 47 hours old is read from the live
    table alone; a day old enough is read from both (a pass clock set back does not hide history)."""
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY, 9))
    reads = []
    real = export_lines._history
    monkeypatch.setattr(export_lines, "_history", lambda *args: reads.append(args[1]) or real(*args))
    now = timezone.now()
    today = now.date()
    old = (now - timedelta(days=3)).date()

    list(export_lines.finished_messages(tenant_id=acme.pk, day=today, now=now))
    assert reads == []
    list(export_lines.finished_messages(tenant_id=acme.pk, day=old, now=now - timedelta(days=30)))
    assert reads == [export_lines.day_bounds(old)[0]]


def test_a_tenant_whose_write_fails_holds_up_neither_the_others_nor_the_prune(monkeypatch):
    acme, _ = tenant_with_key("acme")
    globex, _ = tenant_with_key("globex")
    finished(acme, at(DAY, 2))
    finished(globex, at(DAY, 2))
    old = finished(globex, at(DAY - timedelta(days=1), 2))
    exports.exports_run(now=NOW - timedelta(days=1))  # globex's DAY - 1, to expire below
    assert Export.objects.filter(tenant=globex, day=old.delivered_at.date()).exists()
    real = exports.export_write

    def acme_storage_refuses(*, tenant, day, now):
        if tenant.pk == acme.pk:
            raise OSError("No space left on device")
        return real(tenant=tenant, day=day, now=now)

    monkeypatch.setattr(exports, "export_write", acme_storage_refuses)
    later = NOW + timedelta(days=29, hours=1)  # past the first export's keep time
    result = exports.exports_run(now=later, max_days=1000)

    assert result["failed"] == 1 and result["pruned"] == 1
    assert not Export.objects.filter(tenant=acme).exists()
    assert Export.objects.filter(tenant=globex, day=DAY).exists()

    monkeypatch.setattr(exports, "export_write", real)
    exports.exports_run(now=later, max_days=1000)
    assert Export.objects.filter(tenant=acme, day=DAY).exists()
