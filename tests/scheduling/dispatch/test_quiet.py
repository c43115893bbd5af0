"""Quiet hours: the window arithmetic (hand-computed instants), the policy order, scheduling-time moves
for one-off messages and schedule occurrences, and the execution-time check in the sweep.

Europe/Berlin is CET (+01:00) in January and CEST (+02:00) from 2027-03-28 02:00 -> 03:00 until
2027-10-31 03:00 -> 02:00."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.dispatch import sweep
from scheduling.dispatch.quiet import QuietHoursError, QuietWindow, parse_override, quiet_window_for
from scheduling.messages import service as services
from scheduling.models import Message, MessageEvent, Status
from smsgw.domain_errors import InvalidInput
from tests.factories import RECIPIENT, message, tenant_with_key


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


BERLIN = ZoneInfo("Europe/Berlin")
NIGHT = QuietWindow(time(21), time(8), "Europe/Berlin")


# --- the window --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instant", "inside", "end"),
    [
        (utc(2027, 1, 15, 21, 30), True, utc(2027, 1, 16, 7, 0)),  # 22:30 CET -> 08:00 next day
        (utc(2027, 1, 16, 6, 30), True, utc(2027, 1, 16, 7, 0)),  # 07:30 CET -> 08:00 same day
        (utc(2027, 1, 15, 20, 0), True, utc(2027, 1, 16, 7, 0)),  # 21:00 CET exactly: inside
        (utc(2027, 1, 16, 7, 0), False, None),  # 08:00 CET exactly: the window has ended
        (utc(2027, 1, 15, 19, 59), False, None),  # 20:59 CET
        (utc(2027, 7, 15, 19, 30), True, utc(2027, 7, 16, 6, 0)),  # 21:30 CEST -> 08:00 CEST
    ],
)
def test_overnight_window(instant, inside, end):
    assert NIGHT.contains(instant) is inside
    assert NIGHT.defer(instant) == end


def test_daytime_window_in_kolkata():
    lunch = QuietWindow(time(12), time(13, 30), "Asia/Kolkata")
    assert lunch.defer(utc(2027, 1, 15, 7, 0)) == utc(2027, 1, 15, 8, 0)  # 12:30 IST -> 13:30 IST
    assert lunch.defer(utc(2027, 1, 15, 8, 0)) is None  # 13:30 IST


def test_window_end_in_a_dst_gap_moves_forward_by_the_gap():
    # 01:00-02:30 Berlin on 2027-03-28: 02:30 does not exist, so the window ends at 03:30 CEST.
    early = QuietWindow(time(1), time(2, 30), "Europe/Berlin")
    assert early.defer(utc(2027, 3, 28, 0, 30)) == utc(2027, 3, 28, 1, 30)


def test_window_end_that_occurs_twice_takes_the_reading_after_the_instant():
    # 23:00-02:30 Berlin on 2027-10-31: 02:00-02:59 happens twice (CEST, then CET).
    late = QuietWindow(time(23), time(2, 30), "Europe/Berlin")
    assert late.defer(utc(2027, 10, 31, 0, 10)) == utc(2027, 10, 31, 0, 30)  # 02:10 CEST -> 02:30 CEST
    assert late.defer(utc(2027, 10, 31, 1, 10)) == utc(2027, 10, 31, 1, 30)  # 02:10 CET -> 02:30 CET


# --- policy ------------------------------------------------------------------------------------------


def policy(**kw):
    base = {
        "tenant_start": time(21),
        "tenant_end": time(8),
        "exempt_transactional": False,
        "tenant_timezone": "Europe/Berlin",
        "override": {},
        "recipient_timezone": None,
        "priority": "bulk",
    }
    return quiet_window_for(**{**base, **kw})


def test_policy_order():
    assert policy() == QuietWindow(time(21), time(8), "Europe/Berlin", "tenant")
    assert policy(recipient_timezone="America/New_York").timezone == "America/New_York"
    assert policy(override={"start": "22:00", "end": "07:00"}) == QuietWindow(
        time(22), time(7), "Europe/Berlin", "request"
    )
    assert policy(override={"enabled": False}) is None
    assert policy(tenant_start=None, tenant_end=None) is None
    assert policy(exempt_transactional=True, priority="transactional") is None
    assert policy(exempt_transactional=True, priority="bulk") is not None
    # An explicit window in the request applies even to exempt traffic.
    assert policy(
        exempt_transactional=True, priority="transactional", override={"start": "22:00", "end": "07:00"}
    )


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"start": "21:00", "end": "21:00"}, "both 21:00"),
        ({"start": "25:00", "end": "08:00"}, "not a clock time"),
        ({"start": "21:00"}, "needs both start and end"),
        ({"enabled": True}, "switches quiet hours off"),
        ({"from": "21:00"}, "unknown key"),
        ("21-08", "must be an object"),
    ],
)
def test_bad_overrides_name_quiet_hours(value, says):
    with pytest.raises(QuietHoursError) as err:
        parse_override(value)
    assert err.value.field == "quiet_hours" and says in str(err.value)


# --- scheduling time: one-off messages ----------------------------------------------------------------


@pytest.fixture
def night_tenant(db):
    tenant, key = tenant_with_key(
        "night", default_timezone="Europe/Berlin", quiet_hours_start=time(21), quiet_hours_end=time(8)
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return tenant, client


def _local_in_window() -> str:
    """A 22:30 Berlin wall time a few days ahead (inside 21:00-08:00)."""
    day = (timezone.now() + timedelta(days=3)).date()
    return f"{day.isoformat()}T22:30:00"


def test_api_message_inside_the_tenant_window_moves_to_its_end_and_says_so(night_tenant):
    _, client = night_tenant
    send_at = _local_in_window()
    resp = client.post("/v1/messages", {"to": RECIPIENT, "body": "hi", "send_at": send_at}, format="json")
    assert resp.status_code == 201, resp.content
    msg = Message.objects.get(public_id=resp.json()["id"])
    zone_local = msg.due_at.astimezone(BERLIN)
    assert zone_local.strftime("%H:%M") == "08:00"
    assert zone_local.date() == datetime.fromisoformat(send_at).date() + timedelta(days=1)
    assert msg.quiet_deferred_from is not None and msg.quiet_deferred_from < msg.due_at
    assert msg.run_after == msg.due_at
    assert msg.expires_at - msg.due_at == timedelta(hours=48)  # validity counts from the moved time
    assert (msg.quiet_start, msg.quiet_end, msg.quiet_timezone) == (time(21), time(8), "Europe/Berlin")
    created = msg.events.get(kind="created")
    assert created.details["quiet_hours"] == {"start": "21:00", "end": "08:00", "timezone": "Europe/Berlin"}
    assert "falls inside quiet hours 21:00-08:00" in created.details["quiet_hours_note"]


def test_send_now_inside_the_window_waits_for_its_end(night_tenant):
    tenant, client = night_tenant
    now = timezone.now().astimezone(BERLIN).replace(second=0, microsecond=0)
    # A window around the current Berlin time, one hour each side.
    tenant.quiet_hours_start = (now - timedelta(hours=1)).time()
    tenant.quiet_hours_end = (now + timedelta(hours=1)).time()
    tenant.save()
    resp = client.post("/v1/messages", {"to": RECIPIENT, "body": "now"}, format="json")
    msg = Message.objects.get(public_id=resp.json()["id"])
    assert now + timedelta(minutes=59) <= msg.due_at <= now + timedelta(minutes=61)
    assert msg.quiet_deferred_from <= timezone.now()


def test_transactional_traffic_can_be_exempt(night_tenant):
    tenant, client = night_tenant
    tenant.quiet_hours_exempt_transactional = True
    tenant.save()
    send_at = _local_in_window()
    tx = client.post(
        "/v1/messages", {"to": RECIPIENT, "body": "code 1234", "send_at": send_at}, format="json"
    )
    bulk = client.post(
        "/v1/messages",
        {"to": RECIPIENT, "body": "promo", "send_at": send_at, "priority": "bulk"},
        format="json",
    )
    tx_msg, bulk_msg = (Message.objects.get(public_id=r.json()["id"]) for r in (tx, bulk))
    assert tx_msg.quiet_timezone == "" and tx_msg.quiet_deferred_from is None
    assert bulk_msg.quiet_deferred_from is not None and bulk_msg.due_at > tx_msg.due_at


def test_request_override_and_recipient_timezone_at_the_service(night_tenant):
    tenant, _ = night_tenant
    send_at = _local_in_window()  # 22:30 Berlin
    off, _ = services.message_create(
        tenant=tenant,
        actor="t",
        data={"to": RECIPIENT, "body": "a", "send_at": send_at, "quiet_hours": {"enabled": False}},
    )
    assert off.quiet_timezone == "" and off.quiet_deferred_from is None
    # 22:30 Berlin is 16:30 in New York: outside the tenant's 21:00-08:00 there.
    ny, _ = services.message_create(
        tenant=tenant,
        actor="t",
        data={"to": RECIPIENT, "body": "b", "send_at": send_at, "recipient_timezone": "America/New_York"},
    )
    assert ny.quiet_timezone == "America/New_York" and ny.quiet_deferred_from is None
    with pytest.raises(InvalidInput) as err:
        services.message_create(
            tenant=tenant, actor="t", data={"to": RECIPIENT, "body": "c", "recipient_timezone": "Mars/Base"}
        )
    assert err.value.field == "recipient_timezone"


def test_reschedule_reapplies_the_window_the_message_carries(night_tenant):
    _, client = night_tenant
    day = (timezone.now() + timedelta(days=3)).date()
    resp = client.post(
        "/v1/messages", {"to": RECIPIENT, "body": "x", "send_at": f"{day}T12:00:00"}, format="json"
    )
    msg_id = resp.json()["id"]
    assert Message.objects.get(public_id=msg_id).quiet_deferred_from is None
    resp = client.patch(f"/v1/messages/{msg_id}", {"send_at": f"{day}T23:15:00"}, format="json")
    assert resp.status_code == 200, resp.content
    msg = Message.objects.get(public_id=msg_id)
    assert msg.quiet_deferred_from is not None
    assert msg.due_at.astimezone(BERLIN).strftime("%H:%M") == "08:00"
    assert "quiet_hours_note" in msg.events.get(kind="rescheduled").details


# --- execution time: the sweep -----------------------------------------------------------------------


def _quiet_message(tenant, *, due: datetime, window=NIGHT, priority="transactional") -> Message:
    msg = message(tenant, due_in=0, priority=priority)
    Message.objects.filter(pk=msg.pk).update(
        due_at=due,
        run_after=due,
        expires_at=due + timedelta(days=2),
        quiet_start=window.start,
        quiet_end=window.end,
        quiet_timezone=window.timezone,
    )
    return Message.objects.get(pk=msg.pk)


def test_a_message_made_due_late_by_an_outage_waits_for_the_window_to_end(db):
    tenant, _ = tenant_with_key("late")
    # Due at 20:50 Berlin; the sweep only gets to it at 21:30 (an outage): inside the window now.
    msg = _quiet_message(tenant, due=utc(2027, 1, 15, 19, 50))
    plain = message(tenant, due_in=0)
    Message.objects.filter(pk=plain.pk).update(
        due_at=utc(2027, 1, 15, 19, 50), run_after=utc(2027, 1, 15, 19, 50), expires_at=utc(2027, 1, 17)
    )
    report = sweep.sweep_once(now=utc(2027, 1, 15, 20, 30))
    assert report.quiet_deferred == 1 and report.queued["transactional"] == 1
    msg.refresh_from_db()
    assert msg.status == Status.SCHEDULED
    assert msg.due_at == msg.run_after == utc(2027, 1, 16, 7, 0)  # 08:00 CET
    assert msg.quiet_deferred_from == utc(2027, 1, 15, 19, 50)
    event = msg.events.get(kind="quiet_hours_deferred")
    assert (
        event.details["stage"] == "execution" and event.details["new_due_at"] == "2027-01-16T07:00:00+00:00"
    )
    assert Message.objects.get(pk=plain.pk).status == Status.QUEUED  # no window: unaffected
    # Not due again before the window's end; released once it is over.
    assert sweep.sweep_once(now=utc(2027, 1, 16, 6, 59)).quiet_deferred == 0
    assert Message.objects.get(pk=msg.pk).status == Status.SCHEDULED
    report = sweep.sweep_once(now=utc(2027, 1, 16, 7, 0, 1))
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and report.queued["transactional"] == 1
    assert list(msg.events.order_by("id").values_list("kind", flat=True)) == [
        "created",
        "quiet_hours_deferred",
        "queued",
    ]


def test_a_due_message_outside_its_window_is_queued_normally(db):
    tenant, _ = tenant_with_key("day")
    msg = _quiet_message(tenant, due=utc(2027, 1, 15, 11, 0), priority="bulk")
    report = sweep.sweep_once(now=utc(2027, 1, 15, 11, 0, 1))
    assert report.queued["bulk"] == 1 and report.quiet_deferred == 0
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.quiet_deferred_from is None


def test_a_deferral_past_validity_expires_at_the_window_end(db):
    tenant, _ = tenant_with_key("short")
    msg = _quiet_message(tenant, due=utc(2027, 1, 15, 19, 50))
    Message.objects.filter(pk=msg.pk).update(expires_at=utc(2027, 1, 15, 22, 0))
    sweep.sweep_once(now=utc(2027, 1, 15, 20, 30))
    sweep.sweep_once(now=utc(2027, 1, 16, 7, 0, 1))
    msg.refresh_from_db()
    assert msg.status == Status.EXPIRED
    assert list(MessageEvent.objects.filter(message=msg).values_list("kind", flat=True)) == [
        "created",
        "quiet_hours_deferred",
        "expired",
    ]
