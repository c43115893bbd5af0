"""Schedules API and materializer: create, preview, versions, PATCH / pause / resume / cancel and what
they do to occurrences already made, quiet hours, DST records, tenant scoping, and every bad input
(a 4xx naming the field, never a 500, nothing changed)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

# The work a request did, in this thread's CPU seconds: what the expansion budget bounds. Wall time also
# counted the other processes of a loaded machine (a full run on 2 cores measured 1.4 s for 0.1 s of work).
from time import thread_time as time_now

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Schedule, ScheduleStatus, ScheduleVersion, Status
from scheduling.schedules import service as schedule_service
from scheduling.schedules.materialize import schedules_materialize
from tests.factories import RECIPIENT, sender_for, tenant_with_key

# SQLite half too: the materializer claims schedules differently on SQLite (no SKIP LOCKED).
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def soon(hours: float = 1) -> str:
    """A UTC wall time a little ahead, whole minutes (schedules here use timezone UTC)."""
    at = timezone.now() + timedelta(hours=hours)
    return at.replace(second=0, microsecond=0, tzinfo=None).isoformat()


def create(api, **fields):
    body = {
        "to": RECIPIENT,
        "body": "Take your medicine",
        "rrule": "FREQ=HOURLY;INTERVAL=6",
        "start": soon(),
        "timezone": "UTC",
        **fields,
    }
    return api.post("/v1/schedules", body, format="json")


def fields_of(resp):
    return resp.json()["error"]["fields"]


def occurrences(schedule_id: str, **filters):
    return Message.objects.filter(schedule__public_id=schedule_id, **filters).order_by("due_at")


# --- create and preview -----------------------------------------------------------------------------


def test_create_makes_the_occurrences_inside_the_horizon_as_ordinary_messages(api):
    resp = create(api)
    assert resp.status_code == 201, resp.content
    data = resp.json()
    assert data["id"].startswith("sch_") and data["status"] == "active" and data["version"] == 1
    assert data["rrule"] == "FREQ=HOURLY;INTERVAL=6"
    # Every 6 h from now + 1 h: +1, +7, +13, +19 h are inside the 24 h horizon, +25 h is not.
    assert data["occurrences"]["materialized"] == 4
    made = list(occurrences(data["id"]))
    assert len(made) == 4 and len({m.public_id for m in made}) == 4
    start = datetime.fromisoformat(data["start"]).replace(tzinfo=UTC)
    assert [m.due_at for m in made] == [start + timedelta(hours=h) for h in (0, 6, 12, 18)]
    for m in made:
        assert m.status == Status.SCHEDULED and m.run_after == m.due_at
        assert m.schedule_version == 1 and m.body == "Take your medicine"
        assert m.occurrence_key == f"{data['id']}:{m.due_at:%Y%m%dT%H%M%S}:v1"
        assert m.requested_timezone == "UTC" and m.requested_local_time == m.due_at
        created = m.events.get(kind="created")
        assert created.details["schedule"] == data["id"] and created.details["schedule_version"] == 1
        assert created.details["rrule"] == "FREQ=HOURLY;INTERVAL=6"
    assert data["next_occurrence"]["occurrence_at"] == (start + timedelta(hours=24)).isoformat().replace(
        "+00:00", "Z"
    )
    versions = api.get(f"/v1/schedules/{data['id']}/versions").json()["versions"]
    assert [(v["version"], v["change"]) for v in versions] == [(1, "created")]
    assert versions[0]["actor"].startswith("apikey:")


def test_preview_shows_local_time_and_utc_on_both_sides_of_a_dst_change(api):
    resp = create(api, rrule="FREQ=DAILY", start="2027-03-26T08:30:00", timezone="Europe/Berlin")
    sid = resp.json()["id"]
    preview = api.get(f"/v1/schedules/{sid}/occurrences?count=3&after=2027-03-26T00:00:00Z").json()
    rows = [(o["local_time"], o["occurrence_at"], o["dst_adjustment"]) for o in preview["occurrences"]]
    assert rows == [
        ("2027-03-26T08:30:00", "2027-03-26T07:30:00Z", "none"),
        ("2027-03-27T08:30:00", "2027-03-27T07:30:00Z", "none"),
        ("2027-03-28T08:30:00", "2027-03-28T06:30:00Z", "none"),
    ]
    assert all(o["message"] is None and o["timezone"] == "Europe/Berlin" for o in preview["occurrences"])


def test_preview_names_the_messages_already_made(api):
    sid = create(api).json()["id"]
    preview = api.get(f"/v1/schedules/{sid}/occurrences?count=6").json()["occurrences"]
    made = {m.public_id for m in occurrences(sid)}
    assert [o["message"]["id"] for o in preview[:4]] == [m.public_id for m in occurrences(sid)]
    assert {o["message"]["id"] for o in preview[:4]} == made
    assert preview[4]["message"] is None and preview[5]["message"] is None


@pytest.mark.parametrize(
    ("params", "field"), [("count=0", "count"), ("count=5000", "count"), ("after=yesterday", "after")]
)
def test_preview_bad_parameters(api, params, field):
    sid = create(api).json()["id"]
    resp = api.get(f"/v1/schedules/{sid}/occurrences?{params}")
    assert resp.status_code == 400 and field in fields_of(resp)


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"rrule": "FREQ=DAILY;BYMONTHDAY=32"}, "rrule"),
        ({"rrule": "FREQ=DAILY;COUNT=3;UNTIL=20271231T000000Z"}, "rrule"),
        ({"rrule": "FREQ=DAILY;UNTIL=20271231"}, "rrule"),  # DATE UNTIL with a date-time start
        ({"rrule": "FREQ=SECONDLY"}, "rrule"),  # fires every second
        ({"rrule": "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"}, "rrule"),  # never fires
        ({"rrule": ""}, "rrule"),
        ({"start": "2027-01-01"}, "start"),
        ({"start": "2027-01-01T08:00:00Z"}, "start"),
        ({"exdate": ["2027-12-25T08:00:00+01:00"]}, "exdate"),
        ({"exdate": "2027-12-25"}, "exdate"),
        ({"quiet_hours": {"start": "21:00", "end": "21:00"}}, "quiet_hours"),
        ({"quiet_hours": {"start": "9pm", "end": "8am"}}, "quiet_hours"),
        ({"recipient_timezone": "Nowhere/Town"}, "recipient_timezone"),
        ({"dst_policy": "latest"}, "dst_policy"),
        ({"to": "12345"}, "to"),
        ({"body": ""}, "body"),
        ({"validity_seconds": 5}, "validity_seconds"),
        ({"rule": "FREQ=DAILY"}, "rule"),  # unknown field
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(api, override, field):
    resp = create(api, **override)
    assert resp.status_code == 400, resp.content
    assert field in fields_of(resp), resp.json()
    assert not Schedule.objects.exists() and not ScheduleVersion.objects.exists()
    assert not Message.objects.exists()


def test_a_rejected_patch_changes_nothing(api):
    sid = create(api).json()["id"]
    before = list(occurrences(sid).values_list("public_id", "status"))
    resp = api.patch(f"/v1/schedules/{sid}", {"rrule": "FREQ=MINUTELY"}, format="json")
    assert resp.status_code == 400 and "rrule" in fields_of(resp)
    assert Schedule.objects.get(public_id=sid).version == 1
    assert list(occurrences(sid).values_list("public_id", "status")) == before
    assert ScheduleVersion.objects.filter(schedule__public_id=sid).count() == 1


def test_a_cancelled_schedule_cannot_be_changed_paused_or_resumed(api):
    sid = create(api).json()["id"]
    assert api.post(f"/v1/schedules/{sid}/cancel").status_code == 200
    for method, path, body in [
        ("patch", "", {"body": "new"}),
        ("post", "/pause", None),
        ("post", "/resume", None),
    ]:
        resp = getattr(api, method)(f"/v1/schedules/{sid}{path}", body, format="json")
        assert resp.status_code == 409, (path, resp.content)
        assert resp.json()["error"]["status"] == "cancelled"
    again = api.post(f"/v1/schedules/{sid}/cancel")
    assert again.status_code == 200 and again.json()["changed"] is False


def test_another_tenants_schedule_is_not_found(api):
    _, other_key = tenant_with_key("other")
    sid = create(api).json()["id"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    for method, path in [
        ("get", ""),
        ("patch", ""),
        ("post", "/pause"),
        ("post", "/resume"),
        ("post", "/cancel"),
        ("get", "/occurrences"),
        ("get", "/versions"),
        ("get", "/messages"),
    ]:
        resp = getattr(api, method)(f"/v1/schedules/{sid}{path}", {"body": "x"}, format="json")
        assert resp.status_code == 404, (method, path)
    assert api.get("/v1/schedules").json()["results"] == []
    assert Schedule.objects.get(public_id=sid).status == ScheduleStatus.ACTIVE


# --- versions and what a change does to occurrences ------------------------------------------------


def test_patch_makes_a_version_cancels_future_occurrences_and_leaves_in_flight_ones(api):
    sid = create(api).json()["id"]
    first, *rest = occurrences(sid)
    # The first occurrence is already with the send queue when the change arrives.
    transitions.transition(first.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")

    resp = api.patch(f"/v1/schedules/{sid}", {"body": "Take two pills"}, format="json")
    assert resp.status_code == 200, resp.content
    data = resp.json()
    assert data["version"] == 2 and data["body"] == "Take two pills"
    assert sorted(data["occurrences"]["cancelled"]) == sorted(m.public_id for m in rest)
    assert [(k["id"], k["status"], k["schedule_version"]) for k in data["occurrences"]["kept"]] == [
        (first.public_id, "queued", 1)
    ]
    # The three later slots are regenerated under version 2; the in-flight one keeps version 1.
    live = occurrences(sid).exclude(status=Status.CANCELLED)
    assert [(m.schedule_version, m.body) for m in live] == [(1, "Take your medicine")] + [
        (2, "Take two pills")
    ] * 3
    assert [m.due_at for m in live][1:] == [m.due_at for m in rest]
    assert data["occurrences"]["materialized"] == 3
    cancelled = MessageEvent.objects.get(message=rest[0], kind="cancelled")
    assert cancelled.details["new_schedule_version"] == 2 and cancelled.actor.startswith("apikey:")
    note = MessageEvent.objects.get(message=first, kind="schedule_change_not_applied")
    assert "already queued" in note.details["reason"]
    versions = api.get(f"/v1/schedules/{sid}/versions").json()["versions"]
    assert [(v["version"], v["change"], v["changed_fields"]) for v in versions][1] == (2, "updated", ["body"])
    assert versions[1]["definition"]["body"] == "Take two pills"
    assert versions[0]["definition"]["body"] == "Take your medicine"


def test_patch_of_the_time_moves_the_future_occurrences(api):
    sid = create(api).json()["id"]
    new_start = soon(2)
    resp = api.patch(
        f"/v1/schedules/{sid}", {"start": new_start, "rrule": "FREQ=HOURLY;INTERVAL=12"}, format="json"
    )
    assert resp.status_code == 200, resp.content
    assert resp.json()["version"] == 2
    live = occurrences(sid, status=Status.SCHEDULED)
    start = datetime.fromisoformat(new_start).replace(tzinfo=UTC)
    assert [m.due_at for m in live] == [start, start + timedelta(hours=12)]
    assert {m.schedule_version for m in live} == {2}
    assert api.patch(f"/v1/schedules/{sid}", {"start": new_start}, format="json").json()["changed"] is False


def test_pause_stops_pending_occurrences_and_resume_starts_after_now(api):
    sid = create(api).json()["id"]
    made = list(occurrences(sid))
    transitions.transition(
        made[0].pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
    )
    resp = api.post(f"/v1/schedules/{sid}/pause")
    assert resp.status_code == 200 and resp.json()["status"] == "paused" and resp.json()["version"] == 2
    # Queued ones are cancelled too: nothing of a paused schedule goes out.
    assert sorted(resp.json()["occurrences"]["cancelled"]) == sorted(m.public_id for m in made)
    assert set(occurrences(sid).values_list("status", flat=True)) == {Status.CANCELLED}
    assert schedules_materialize(now=timezone.now() + timedelta(days=3)).created == 0
    assert api.post(f"/v1/schedules/{sid}/pause").json()["changed"] is False

    resp = api.post(f"/v1/schedules/{sid}/resume")
    assert resp.status_code == 200 and resp.json()["status"] == "active" and resp.json()["version"] == 3
    fresh = list(occurrences(sid, status=Status.SCHEDULED))
    assert [m.due_at for m in fresh] == [m.due_at for m in made]  # same slots, new version, new rows
    assert {m.schedule_version for m in fresh} == {3}
    kinds = [v["change"] for v in api.get(f"/v1/schedules/{sid}/versions").json()["versions"]]
    assert kinds == ["created", "paused", "resumed"]


def test_schedule_actions_show_in_the_occurrence_timeline(api):
    sid = create(api).json()["id"]
    msg = occurrences(sid).first()
    api.post(f"/v1/schedules/{sid}/cancel")
    events = api.get(f"/v1/messages/{msg.public_id}/events").json()["events"]
    assert [e["kind"] for e in events] == ["created", "cancelled"]
    assert events[0]["details"]["schedule"] == sid
    assert events[1]["details"]["reason"] == f"schedule {sid} cancelled"


def test_list_and_messages_endpoints(api):
    sid = create(api).json()["id"]
    create(api, rrule="FREQ=DAILY")
    assert len(api.get("/v1/schedules").json()["results"]) == 2
    assert [s["id"] for s in api.get("/v1/schedules?status=paused").json()["results"]] == []
    assert api.get("/v1/schedules?status=sleeping").status_code == 400
    msgs = api.get(f"/v1/schedules/{sid}/messages").json()["results"]
    assert len(msgs) == 4 and {m["schedule_version"] for m in msgs} == {1}
    assert all(m["occurrence"].startswith(f"{sid}:") for m in msgs)


# --- the materializer -------------------------------------------------------------------------------


def test_a_rerun_or_a_cursor_moved_back_never_creates_a_second_occurrence(api):
    sid = create(api, rrule="FREQ=DAILY", start="2027-01-10T09:00:00").json()["id"]
    assert not occurrences(sid).exists()
    later = utc(2027, 1, 12, 12)
    report = schedules_materialize(now=later)
    assert report.created == 4  # 01-10 .. 01-13 09:00, all within 24 h of "later"
    assert schedules_materialize(now=later).schedules == 0  # nothing due any more
    # Simulate a materializer that lost its cursor update after its rows were committed.
    Schedule.objects.filter(public_id=sid).update(
        cursor_local=utc(2027, 1, 10, 9), next_occurrence_at=utc(2027, 1, 10, 9)
    )
    again = schedules_materialize(now=later)
    assert (again.created, again.existing) == (0, 4)
    assert occurrences(sid).count() == 4
    assert Schedule.objects.get(public_id=sid).materialized_count == 4  # what went in, not what was offered
    assert MessageEvent.objects.filter(message__schedule__public_id=sid, kind="created").count() == 4


def test_a_run_costs_what_is_due_not_what_exists(api):
    for _ in range(30):
        create(api, rrule="FREQ=DAILY", start="2027-06-01T09:00:00")
    with CaptureQueriesContext(connection) as idle:
        report = schedules_materialize()
    assert report.schedules == 0
    selects = [q["sql"] for q in idle.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1 and "LIMIT" in selects[0]
    due = create(api, rrule="FREQ=DAILY", start="2027-01-10T09:00:00").json()["id"]
    report = schedules_materialize(now=utc(2027, 1, 10, 0))
    assert report.schedules == 1 and report.created == 1
    assert occurrences(due).count() == 1


def test_dst_adjustment_is_stored_on_the_occurrence_and_shown_in_its_timeline(api):
    sid = create(api, rrule="FREQ=DAILY", start="2027-03-13T02:30:00", timezone="America/New_York").json()[
        "id"
    ]
    schedules_materialize(now=utc(2027, 3, 13, 12))
    gap = occurrences(sid).get(requested_local_time=utc(2027, 3, 14, 2, 30))
    assert gap.dst_adjustment == "gap_shifted_forward" and gap.due_at == utc(2027, 3, 14, 7, 30)
    created = gap.events.get(kind="created")
    assert created.details["dst_adjustment"] == "gap_shifted_forward"
    assert "does not exist" in created.details["dst_note"]


def test_a_count_rule_ends_the_schedule_after_its_last_occurrence(api):
    sid = create(api, rrule="FREQ=DAILY;COUNT=2", start="2027-01-10T09:00:00").json()["id"]
    schedules_materialize(now=utc(2027, 1, 11, 0))
    schedule = Schedule.objects.get(public_id=sid)
    assert schedule.status == ScheduleStatus.ENDED and schedule.next_occurrence_at is None
    assert occurrences(sid).count() == 2
    assert api.get(f"/v1/schedules/{sid}/occurrences").json()["occurrences"] == []


def test_quiet_hours_move_occurrences_to_the_window_end(api):
    tenant = api.tenant
    tenant.quiet_hours_start, tenant.quiet_hours_end = time(21), time(8)
    tenant.save()
    moved = create(api, rrule="FREQ=DAILY", start="2027-01-10T22:00:00").json()
    assert moved["quiet_hours"]["effective"] == {
        "start": "21:00",
        "end": "08:00",
        "timezone": "UTC",
        "source": "tenant",
    }
    loud = create(api, rrule="FREQ=DAILY", start="2027-01-10T22:00:00", quiet_hours={"enabled": False}).json()
    preview = api.get(f"/v1/schedules/{moved['id']}/occurrences?count=1&after=2027-01-10T00:00:00Z").json()
    first = preview["occurrences"][0]
    assert (first["occurrence_at"], first["due_at"], first["quiet_hours_moved"]) == (
        "2027-01-10T22:00:00Z",
        "2027-01-11T08:00:00Z",
        True,
    )
    schedules_materialize(now=utc(2027, 1, 10, 12))
    msg = occurrences(moved["id"]).get()
    assert msg.due_at == utc(2027, 1, 11, 8) and msg.quiet_deferred_from == utc(2027, 1, 10, 22)
    assert (
        "quiet hours 21:00-08:00 (tenant policy)"
        in msg.events.get(kind="created").details["quiet_hours_note"]
    )
    assert occurrences(loud["id"]).get().due_at == utc(2027, 1, 10, 22)


# --- tenant quiet hours -----------------------------------------------------------------------------


def test_tenant_quiet_hours_endpoint(api):
    assert api.get("/v1/quiet-hours").json() == {
        "start": None,
        "end": None,
        "timezone": "UTC",
        "exempt_transactional": False,
    }
    same = api.put("/v1/quiet-hours", {"start": "21:00", "end": "21:00"}, format="json")
    assert same.status_code == 400 and "end" in fields_of(same)
    bad = api.put("/v1/quiet-hours", {"start": "21", "end": "08:00"}, format="json")
    assert bad.status_code == 400 and "start" in fields_of(bad)
    ok = api.put(
        "/v1/quiet-hours", {"start": "21:00", "end": "08:00", "exempt_transactional": True}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["start"] == "21:00" and ok.json()["exempt_transactional"]
    api.tenant.refresh_from_db()
    assert (api.tenant.quiet_hours_start, api.tenant.quiet_hours_end) == (time(21), time(8))
    assert api.delete("/v1/quiet-hours").json()["start"] is None


def test_patch_of_the_sender_replaces_the_old_one_whatever_its_kind(api):
    sid = create(api, **{"from": "+14155550100"}).json()["id"]
    service = "MG" + "0" * 32
    sender_for(api.tenant, service)  # a sender pool the operator assigned to the tenant
    resp = api.patch(f"/v1/schedules/{sid}", {"messaging_service_sid": service}, format="json")
    assert resp.status_code == 200, resp.content
    assert (resp.json()["from"], resp.json()["messaging_service_sid"]) == ("", service)
    live = occurrences(sid, status=Status.SCHEDULED)
    assert {(m.from_number, m.sender_pool) for m in live} == {("", service)}


def test_a_disabled_tenant_materializes_nothing_until_enabled(api):
    from scheduling.schedules.materialize import schedules_materialize
    from smsgw.models import Tenant

    data = create(api).json()
    assert data["occurrences"]["materialized"] == 4
    Tenant.objects.filter(pk=api.tenant.pk).update(is_active=False)
    later = timezone.now() + timedelta(hours=30)  # the next occurrence (+25 h) is inside the horizon now
    assert schedules_materialize(now=later).created == 0
    assert occurrences(data["id"]).count() == 4
    Tenant.objects.filter(pk=api.tenant.pk).update(is_active=True)
    assert schedules_materialize(now=later).created >= 1


# --- the expansion budget (issue 37) ------------------------------------------------------------------
COSTLY_RULE = "FREQ=SECONDLY;BYMONTH=2;BYHOUR=8;BYMINUTE=0;BYSECOND=0;COUNT=10000"


def _store_costly_rule(sid: str) -> None:
    """A rule saved before the budget existed: written straight to the row, as an old one would be."""
    Schedule.objects.filter(public_id=sid).update(rrule=COSTLY_RULE, count_last_local=None)


def test_a_costly_rule_is_refused_on_create_in_well_under_a_second(api):
    started = time_now()
    resp = create(api, rrule=COSTLY_RULE)
    assert time_now() - started < 1.0
    assert resp.status_code == 400, resp.content
    assert "too costly" in fields_of(resp)["rrule"][0]
    assert not Schedule.objects.exists() and not Message.objects.exists()


def test_a_costly_rule_is_refused_on_patch_and_changes_nothing(api):
    sid = create(api).json()["id"]
    before = list(occurrences(sid).values_list("public_id", "status"))
    started = time_now()
    resp = api.patch(f"/v1/schedules/{sid}", {"rrule": COSTLY_RULE}, format="json")
    assert time_now() - started < 1.0
    assert resp.status_code == 400 and "rrule" in fields_of(resp)
    assert Schedule.objects.get(public_id=sid).version == 1
    assert list(occurrences(sid).values_list("public_id", "status")) == before


def test_preview_of_a_stored_costly_rule_is_a_400_naming_rrule(api):
    sid = create(api).json()["id"]
    _store_costly_rule(sid)
    started = time_now()
    resp = api.get(f"/v1/schedules/{sid}/occurrences?count=1000")
    assert time_now() - started < 1.0
    assert resp.status_code == 400 and "rrule" in fields_of(resp)


def test_the_materializer_ends_a_stored_costly_rule_and_goes_on_with_the_batch(api):
    costly = create(api).json()["id"]
    healthy = create(api).json()["id"]
    _store_costly_rule(costly)
    later = timezone.now() + timedelta(hours=30)
    started = time_now()
    report = schedules_materialize(now=later)
    assert time_now() - started < 1.0
    assert report.schedules == 2 and report.ended == 1
    assert Schedule.objects.get(public_id=costly).status == ScheduleStatus.ENDED
    assert Schedule.objects.get(public_id=healthy).status == ScheduleStatus.ACTIVE
    assert occurrences(healthy).count() > 4 and occurrences(costly).count() == 4
    # Ended: the next run does not pick it up again.
    assert schedules_materialize(now=later).schedules == 0


def test_versions_show_an_operators_change_as_operator(api):
    sid = create(api).json()["id"]
    schedule = Schedule.objects.get(public_id=sid)
    # What the admin's pause action does (scheduling.admin), as operator alice.
    schedule_service.schedule_pause(tenant=schedule.tenant, public_id=sid, actor="admin:alice")
    assert ScheduleVersion.objects.filter(schedule=schedule).latest("number").actor == "admin:alice"
    versions = api.get(f"/v1/schedules/{sid}/versions").json()["versions"]
    assert [v["actor"] for v in versions][-1] == "operator"
    assert versions[0]["actor"].startswith("apikey:")
