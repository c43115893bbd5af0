"""The receipt spool: a signed callback that meets a database outage is written to local disk, answered
201, and stored (once, with its arrival time) when the database is back."""

from __future__ import annotations

import errno
import json
import os
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from delivery.providers.base import CallbackData
from receipts import spool
from receipts.ingest import receipt_ingest
from receipts.models import ReceiptEvent
from scheduling.models import Status
from smsgw.runtime import file_spool
from tests.receipts.test_receipts import callback, cfg, drain, sent_message, signed_post, tenant  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def spool_dir(settings, tmp_path):
    settings.RECEIPT_SPOOL_DIR = tmp_path / "spool"
    spool.spool_drain_from_web.last = 0.0
    return settings.RECEIPT_SPOOL_DIR


def spooled(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".json")) if directory.exists() else []


@pytest.fixture
def database_down(monkeypatch):
    """The INSERT fails as it does when PostgreSQL is unreachable (psycopg's OperationalError)."""

    def refuse(**_kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr("receipts.api.receipt_ingest", refuse)
    return monkeypatch


def receipt(sid: str = "SM" + "c" * 32, status: str = "delivered") -> CallbackData:
    return CallbackData(
        provider_message_id=sid,
        raw_status=status,
        normalized_status=status,
        error_code="",
        done_at=timezone.now().replace(microsecond=0),
        message_hint="abc",
        attempt_hint=1,
        payload={"MessageSid": sid, "To": "+1415*****23"},
    )


def test_spool_write_is_atomic_one_complete_file_and_no_temporary_left(spool_dir):
    at = timezone.now()
    path = spool.receipt_spool(provider="twilio", callback=receipt(), received_at=at)
    assert path.parent == spool_dir and spooled(spool_dir) == [path.name]
    assert os.listdir(spool_dir) == [path.name]  # the temporary file was renamed, nothing else
    record = json.loads(path.read_text())
    assert record["provider_message_id"] == receipt().provider_message_id
    assert record["received_at"] == at.isoformat()
    assert "Body" not in record["payload"] and record["payload"]["To"] == "+1415*****23"


def test_database_down_signed_callback_is_spooled_and_answered_201(cfg, tenant, spool_dir, database_down):  # noqa: F811
    msg = sent_message(tenant, "SM" + "d" * 32)
    resp = signed_post(callback(msg.provider_message_id, "delivered"))
    assert resp.status_code == 201
    assert len(spooled(spool_dir)) == 1
    assert ReceiptEvent.objects.count() == 0


def test_database_down_wrong_signature_is_still_403_and_spools_nothing(cfg, tenant, spool_dir, database_down):  # noqa: F811
    resp = signed_post(callback("SM" + "e" * 32, "delivered"), token="the-wrong-token")
    assert resp.status_code == 403
    assert spooled(spool_dir) == []


def test_database_down_and_disk_full_is_503_and_logged(cfg, tenant, spool_dir, database_down, caplog):  # noqa: F811
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    database_down.setattr(file_spool.os, "write", full)
    resp = signed_post(callback("SM" + "f" * 32, "delivered", To="+14155550123"))
    assert resp.status_code == 503
    assert spooled(spool_dir) == [] and not [n for n in os.listdir(spool_dir) if n.endswith(".tmp")]
    assert "spool not writable" in caplog.text
    assert "+14155550123" not in caplog.text  # numbers and bodies never logged


def test_drain_stores_once_with_arrival_time_then_applies(cfg, tenant, spool_dir, database_down):  # noqa: F811
    msg = sent_message(tenant, "SM" + "1" * 32)
    for status in ("sent", "delivered", "delivered"):  # the provider's retry is a duplicate
        assert signed_post(callback(msg.provider_message_id, status)).status_code == 201
    assert len(spooled(spool_dir)) == 3
    arrived = [json.loads((spool_dir / n).read_text())["received_at"] for n in spooled(spool_dir)]
    database_down.undo()  # the database is back

    assert spool.spool_drain() == 3
    assert spooled(spool_dir) == []
    rows = list(ReceiptEvent.objects.order_by("id"))
    assert [r.raw_status for r in rows] == ["sent", "delivered"]
    assert [r.received_at.isoformat() for r in rows] == arrived[:2]  # when it arrived, not when drained
    assert spool.spool_drain() == 0  # idempotent: nothing left
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED and msg.delivered_at <= rows[1].received_at + timedelta(minutes=15)


def test_drain_of_a_callback_also_stored_live_is_a_duplicate(spool_dir):
    at = timezone.now() - timedelta(seconds=30)
    spool.receipt_spool(provider="twilio", callback=receipt(), received_at=at)
    receipt_ingest(provider="twilio", callback=receipt())  # the same callback, stored live meanwhile
    assert spool.spool_drain() == 1
    assert ReceiptEvent.objects.count() == 1 and spooled(spool_dir) == []


def test_drain_keeps_the_file_while_the_database_is_down(spool_dir, monkeypatch):
    spool.receipt_spool(provider="twilio", callback=receipt(), received_at=timezone.now())

    def refuse(**_kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(spool, "receipt_ingest", refuse)
    assert spool.spool_drain() == 0
    assert len(spooled(spool_dir)) == 1


def test_unreadable_file_is_set_aside_not_retried(spool_dir):
    spool_dir.mkdir(parents=True)
    (spool_dir / "00000000000000000001-x.json").write_text("{not json")
    assert spool.spool_drain() == 0
    assert os.listdir(spool_dir) == ["00000000000000000001-x.json.bad"]


def test_empty_or_missing_spool_is_one_scandir(spool_dir, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert spool.spool_drain() == 0
