"""The content horizon: a final message past its tenant's horizon loses its body, full number and
metadata, live or in history; a recent one, a pending one and the suppression list are untouched."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.models import Suppression
from retention.history import history_move_batch
from retention.horizon import history_content_due, messages_content_due
from retention.jobs import retention_run
from retention.models import MessageHistory, RetentionAudit, TenantRetention
from scheduling.models import Message, Status
from tests.factories import message, tenant_with_key

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

NUMBER = "+14155550123"


def _final(tenant, days_ago: float, status=Status.DELIVERED, to=NUMBER):
    msg = message(tenant, status=status, to=to, body="secret code 4242")
    Message.objects.filter(pk=msg.pk).update(
        metadata={"order": "A-1"}, updated_at=timezone.now() - timedelta(days=days_ago), run_after=None
    )
    return msg


def test_live_messages_lose_their_content_at_the_tenants_horizon():
    tenant, _ = tenant_with_key()
    TenantRetention.objects.create(tenant=tenant, content_days=7)
    Suppression.objects.create(tenant=tenant, number=NUMBER, source="api", created_at=timezone.now())
    old = _final(tenant, 8)
    recent = _final(tenant, 6)
    pending = message(tenant, due_in=86400 * 300, to=NUMBER)
    other, _ = tenant_with_key("other")
    default = _final(other, 8)  # the default horizon: 30 days

    done = messages_content_due(now=timezone.now())

    assert done["messages"] == 1
    gone = Message.objects.get(pk=old.pk)
    assert (gone.body, gone.metadata, gone.status) == ("", {}, "delivered")
    assert gone.to.startswith("+1") and "*" in gone.to and gone.to != NUMBER
    for kept in (recent, pending, default):
        row = Message.objects.get(pk=kept.pk)
        assert (row.to, bool(row.body)) == (NUMBER, True)
    assert Suppression.objects.filter(tenant=tenant, number=NUMBER).exists()
    assert messages_content_due(now=timezone.now()) == {}  # a repeat finds nothing


def test_history_rows_lose_their_content_on_their_redaction_day():
    tenant, _ = tenant_with_key()
    TenantRetention.objects.create(tenant=tenant, content_days=3, record_days=30)
    msg = _final(tenant, 0)
    Message.objects.filter(pk=msg.pk).update(updated_at=timezone.now() - timedelta(hours=50))
    history_move_batch(now=timezone.now())
    row = MessageHistory.objects.get(id=msg.pk)
    assert row.document["message"]["body"] == "secret code 4242" and row.redact_on is not None

    assert history_content_due(now=timezone.now()) == {}  # not yet
    done = history_content_due(now=timezone.now() + timedelta(days=4))

    assert done == {"message_history": 1}
    row.refresh_from_db()
    assert row.redact_on is None and "*" in row.to
    assert row.document["message"]["body"] == "" and row.document["message"]["metadata"] == {}
    assert NUMBER not in str(row.document)
    assert row.document["events"][0]["kind"] == "created"  # the timeline stays


def test_the_job_moves_then_removes_content_and_audits_counts_only():
    tenant, _ = tenant_with_key()
    msg = _final(tenant, 31)  # final a month ago: it moves to history, whose redaction day has come
    totals = retention_run(now=timezone.now())
    assert totals["history_move"]["messages_moved"] == 1
    assert totals["content_horizon"] == {"message_history": 1}
    assert NUMBER not in str(MessageHistory.objects.get(id=msg.pk).document)
    audit = RetentionAudit.objects.get(action="content_horizon")
    assert NUMBER not in str(audit.counts) and audit.subject == ""
