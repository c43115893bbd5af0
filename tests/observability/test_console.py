"""The console's landing page (reporting.console, reporting.minutes): messages, circuits, holds and
backlogs put in known states, the minute pass run, and the page's figures checked against them; the
links lead to lists that show exactly those messages; a role sees only what its lists would show, and
never a number or a body."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from delivery.models import ProviderCircuit, ProviderHold
from receipts.models import WebhookDelivery
from reporting.minutes import console_minutes_record, lag_bucket, lag_bucket_bound, lag_hour, minute_floor
from reporting.sparklines import sparkline
from scheduling.models import Message, Status
from smsgw.console.roles import roles_sync
from smsgw.observability.models import ConsoleMinute
from tests.factories import message, recipient, tenant_with_key

PASSWORD = "pw-for-tests-only-1"
ROW = re.compile(r'<tr data-figure="([^"]+)" data-now="([^"]*)" data-hour="([^"]*)">')


def figures(html: str) -> dict[str, tuple[float | None, float | None]]:
    def number(text: str) -> float | None:
        return float(text) if text else None

    return {key: (number(now), number(hour)) for key, now, hour in ROW.findall(html)}


def staff(role: str | None) -> Client:
    roles_sync(apps)
    user = User.objects.create_user(role or "nobody", "x@example.com", PASSWORD, is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


def _move(msg: Message, **fields) -> None:
    Message.objects.filter(pk=msg.pk).update(**fields)


@pytest.fixture
def known_states(db):
    """Three messages due (the oldest 5 minutes late) and one not yet; four sent in the last closed
    minutes (three through "sandbox", one finished since through "other", segments 1-3); failures of two
    codes, and one older than the hour; an open circuit, an open hold, two webhooks waiting."""
    tenant = tenant_with_key("acme")[0]
    now = timezone.now()
    last = minute_floor(now - timedelta(seconds=5)) - timedelta(minutes=1)  # the last closed minute
    due_ids = [
        message(tenant, due_in=-seconds, to=recipient(seconds), body="secret body text").public_id
        for seconds in (300, 60, 30)
    ]
    future_id = message(tenant, due_in=3600).public_id
    sent = [
        (last + timedelta(seconds=10), 2.0, "sandbox", Status.SENT, 1),
        (last + timedelta(seconds=20), 4.0, "sandbox", Status.SENT, 2),
        (last - timedelta(minutes=2), 8.0, "sandbox", Status.DELIVERED, 1),
        (last - timedelta(minutes=3), 1.0, "other", Status.DELIVERED, 3),
    ]
    for i, (at, lag, provider, status, segments) in enumerate(sent):
        msg = message(tenant, status=Status.SENDING, to=recipient(100 + i))
        _move(msg, status=status, sent_at=at, due_at=at - timedelta(seconds=lag), provider=provider,
              segments=segments, updated_at=now)  # fmt: skip
    failures = [
        (last - timedelta(minutes=4), "sandbox", Status.FAILED, "30003"),
        (last - timedelta(minutes=4), "sandbox", Status.UNDELIVERED, "30003"),
        (last, "other", Status.FAILED, "21211"),
        (now - timedelta(hours=2), "sandbox", Status.FAILED, "30003"),  # outside the hour
    ]
    failed_ids = []
    for i, (at, provider, status, code) in enumerate(failures):
        msg = message(tenant, status=Status.SENDING, to=recipient(200 + i))
        _move(msg, status=status, failed_at=at, provider=provider, error_code=code, updated_at=at)
        failed_ids.append(msg.public_id)
    ProviderCircuit.objects.create(
        provider="sandbox", account="AC1", state="open", window_started_at=now, opened_at=now, updated_at=now
    )
    ProviderHold.objects.create(
        provider="sandbox", account="AC1", scope="sender", scope_value="+14155550100", reason="test",
        opened_at=now, last_seen_at=now, next_probe_at=now, probe_interval_seconds=60,
    )  # fmt: skip
    for minutes in (10, 1):
        WebhookDelivery.objects.create(
            webhook_id="wh_" + secrets.token_hex(8), tenant=tenant, event_type="message.sent", payload={},
            next_attempt_at=now - timedelta(minutes=minutes), created_at=now,
        )  # fmt: skip
    assert console_minutes_record(now=now) == 15  # the first pass fills the last 15 closed minutes
    return {"now": now, "failed_ids": failed_ids, "due_ids": due_ids, "future_id": future_id}


def test_the_landing_page_shows_what_the_database_holds(known_states):
    response = staff("viewer").get("/admin/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "<title>Health at a glance | smsgw</title>" in html and "Django administration" not in html
    got = figures(html)
    assert got["due"][0] == 3
    assert 300 <= got["due_oldest"][0] < 330
    # The last closed minute: two sends (lags 2 s and 4 s), three segments; the hour: four sends.
    assert got["sent:sandbox"] == (2, 3) and got["sent:other"] == (0, 1)
    assert got["segments:sandbox"] == (3, 4) and got["segments:other"] == (0, 3)
    assert got["lag_p50"][0] == 2.0 and got["lag_p99"][0] == 4.0
    assert got["lag_p50"][1] == pytest.approx(2.0, rel=0.1) and got["lag_p99"][1] == pytest.approx(
        8.0, rel=0.1
    )
    assert got["failed:sandbox|30003"] == (0, 2)  # failed and undelivered; the one of 2 h ago is not
    assert got["failed:other|21211"] == (1, 1)
    assert got["circuits_open"][0] == 1 and got["holds_open"][0] == 1
    assert got["webhook_outbox"][0] == 2 and 600 <= got["webhook_oldest"][0] < 630
    assert got["queues_unconsumed"][0] is not None
    # Never a number or a body: the hold's sender is a number, and the messages' bodies.
    assert "+1415" not in html and "secret body text" not in html
    assert html.count('<svg class="spark"') == len(got)


def test_each_figure_links_to_the_list_behind_it(known_states):
    client = staff("viewer")
    html = client.get("/admin/").content.decode()
    link = re.search(r'data-figure="failed:sandbox\|30003".*?href="([^"]+)"', html, re.S)
    assert link is not None
    listed = client.get(link.group(1).replace("&amp;", "&")).content.decode()
    ids = known_states["failed_ids"]
    # This hour's two of that provider and code; not the other provider's, nor the one of 2 h ago.
    assert ids[0] in listed and ids[1] in listed and ids[2] not in listed and ids[3] not in listed
    due = client.get("/admin/scheduling/message/?due=now").content.decode()
    assert all(i in due for i in known_states["due_ids"]) and known_states["future_id"] not in due
    circuits = client.get("/admin/delivery/providercircuit/?state__exact=open")
    assert circuits.status_code == 200 and "AC1" in circuits.content.decode()


def test_a_role_sees_only_the_figures_of_the_lists_it_may_see(known_states):
    nobody = figures(staff(None).get("/admin/").content.decode())
    assert nobody == {}
    viewer = figures(staff("viewer").get("/admin/").content.decode())
    assert {"due", "circuits_open", "holds_open", "queues_unconsumed", "webhook_outbox"} <= set(viewer)


@pytest.mark.sqlite  # the embedded run's pass too: the upserts and the JSON columns on SQLite
@pytest.mark.django_db
def test_a_second_pass_in_the_minute_rewrites_and_old_rows_go():
    now = timezone.now()
    ConsoleMinute.objects.create(minute=minute_floor(now - timedelta(days=3)), state={})
    assert console_minutes_record(now=now) == 15
    assert console_minutes_record(now=now) == 0  # the closed minutes are written once
    assert ConsoleMinute.objects.filter(minute__lt=now - timedelta(days=2)).count() == 0
    assert ConsoleMinute.objects.get(minute=minute_floor(now)).state["due"] == 0


def test_the_hour_lag_comes_from_the_histograms_within_a_tenth():
    flows = [{"lag": {"hist": {str(lag_bucket(v)): 1}, "max": v}} for v in (0.5, 1.0, 30.0)] + [None]
    p50, p99, n = lag_hour(flows)
    assert n == 3 and 1.0 <= p50 <= 1.1 and p99 == 30.0
    assert lag_bucket_bound(lag_bucket(7.0)) >= 7.0


def test_a_sparkline_is_inline_svg_with_gaps_where_no_minute_was_written():
    svg = str(sparkline([1, 2, None, 3, 4], label="x"))
    assert svg.startswith("<svg") and svg.count("<polyline") == 2
    assert "<circle" not in svg and "http" not in svg  # nothing fetched
