"""Campaign creation: POST /v1/campaigns (JSON and CSV upload), the creation job (called here directly;
tests/integration/test_campaigns.py runs it on a real worker), recipients' timezones across a DST change,
bad rows with their lines, duplicates, opt-outs, idempotency, a resumed job, request-level 400s that store
nothing, and tenant scoping."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db.models import F
from django.utils import timezone

from delivery.guards import suppression
from scheduling.campaigns import make as make_module
from scheduling.campaigns.make import campaign_make
from scheduling.limits import quotas
from scheduling.limits.models import QuotaWindow
from scheduling.models import (
    Campaign,
    CampaignError,
    CampaignRange,
    CampaignUpload,
    Message,
    MessageEvent,
    Status,
)
from tests.factories import SENDER, recipient, tenant_with_key

pytestmark = pytest.mark.django_db

NEW_YORK = "+12125550123"  # America/New_York (given per row below)
LONDON = "+442079460123"  # maps to Europe/London alone
SYDNEY = "+61255501234"  # maps to Australia/Sydney alone
AU_MOBILE = "+61491570156"  # maps to several zones: the campaign's default


def tomorrow_at(hour: int) -> str:
    at = (timezone.now() + timedelta(days=1)).replace(hour=hour, minute=0, second=0, microsecond=0)
    return at.replace(tzinfo=None).isoformat()


def post(api, **fields):
    body = {"template": "Hello {first_name}, your code is {code}", "send_at": tomorrow_at(9) + "Z", **fields}
    return api.post("/v1/campaigns", body, format="json")


def upload(api, csv_text: str, **fields):
    form = {"template": "Hello {first_name}, your code is {code}", "send_at": tomorrow_at(9) + "Z", **fields}
    form["recipients"] = SimpleUploadedFile("list.csv", csv_text.encode(), content_type="text/csv")
    return api.post("/v1/campaigns", form, format="multipart")


def make(resp) -> Campaign:
    assert resp.status_code == 202, resp.content
    campaign = Campaign.objects.get(public_id=resp.json()["id"])
    campaign_make(campaign.pk)
    campaign.refresh_from_db()
    return campaign


def errors_of(campaign: Campaign) -> list[tuple[int, str, str]]:
    return list(
        CampaignError.objects.filter(campaign=campaign).order_by("line").values_list("line", "field", "code")
    )


def fields_of(resp):
    return resp.json()["error"]["fields"]


# --- JSON and CSV, end to end through the job ---------------------------------------------------------


def test_json_campaign_makes_one_scheduled_message_per_recipient_with_its_own_body(api):
    people = [{"phone": recipient(i), "first_name": f"N{i}", "code": str(1000 + i)} for i in range(5)]
    resp = post(api, recipients=people, name="Codes")
    data = resp.json()
    assert resp.status_code == 202 and resp["Location"] == f"/v1/campaigns/{data['id']}"
    assert data["status"] == "creating" and data["variables"] == ["first_name", "code"]
    assert data["priority"] == "bulk" and data["time"]["mode"] == "instant"
    campaign = make(resp)
    assert campaign.status == "active" and campaign.made_at is not None
    assert (campaign.messages_made, campaign.rows_rejected, campaign.recipients_total) == (5, 0, 5)
    messages = Message.objects.filter(campaign=campaign).order_by("to")
    assert [(m.to, m.body, m.status, m.priority) for m in messages] == [
        (recipient(i), f"Hello N{i}, your code is {1000 + i}", Status.SCHEDULED, "bulk") for i in range(5)
    ]
    due = datetime.fromisoformat(tomorrow_at(9)).replace(tzinfo=UTC)
    assert {m.due_at for m in messages} == {due}
    assert {m.from_number for m in messages} == {SENDER}
    events = MessageEvent.objects.filter(message__campaign=campaign, kind="created")
    assert events.count() == 5
    assert {e.details["campaign"] for e in events} == {campaign.public_id}
    # The upload's copy is gone once every message is made; progress is read from the counters.
    assert not CampaignUpload.objects.filter(campaign=campaign).exists()
    detail = api.get(f"/v1/campaigns/{campaign.public_id}").json()
    assert detail["progress"] == {"scheduled": 5}
    assert detail["creation"]["messages_made"] == 5 and detail["status"] == "active"


def test_csv_with_bad_rows_reports_each_line_and_makes_every_good_row_once(api, settings):
    settings.MAX_SEGMENTS = 2
    long_name = "x" * 400
    csv_text = (
        "phone,first_name,code,timezone\n"
        f"{recipient(1)},Ann,1,\n"  # line 2: good
        "+1415,Bob,2,\n"  # line 3: bad number
        f"{recipient(3)},,3,\n"  # line 4: missing first_name
        f"{recipient(4)},{long_name},4,\n"  # line 5: over the segment limit
        f"{recipient(5)},Eve,5,Mars/Olympus\n"  # line 6: bad timezone
        f"{recipient(1)},Ann again,6,\n"  # line 7: duplicate of line 2
        f"{recipient(7)},Gus,7,Europe/Paris\n"  # line 8: good
        "\n"  # blank: not a recipient
        f"{recipient(9)},Ivy,9,,extra\n"  # line 10: too many values
        f"{recipient(10)},Jo,10,\n"  # line 11: good
    )
    campaign = make(upload(api, csv_text))
    assert errors_of(campaign) == [
        (3, "phone", "invalid_number"),
        (4, "first_name", "missing_variable"),
        (5, "body", "too_long"),
        (6, "timezone", "invalid_timezone"),
        (7, "phone", "duplicate"),
        (10, "row", "invalid_row"),
    ]
    made = Message.objects.filter(campaign=campaign)
    assert sorted(made.values_list("to", flat=True)) == sorted([recipient(1), recipient(7), recipient(10)])
    assert made.get(to=recipient(1)).body == "Hello Ann, your code is 1"
    assert set(made.values_list("status", flat=True)) == {Status.SCHEDULED}
    assert (campaign.messages_made, campaign.rows_rejected, campaign.duplicates_skipped) == (3, 5, 1)
    page = api.get(f"/v1/campaigns/{campaign.public_id}/errors").json()
    assert [(e["line"], e["code"]) for e in page["results"]] == [
        (3, "invalid_number"),
        (4, "missing_variable"),
        (5, "too_long"),
        (6, "invalid_timezone"),
        (7, "duplicate"),
        (10, "invalid_row"),
    ]


def test_allow_duplicates_sends_a_number_once_per_row(api):
    people = [{"phone": recipient(1), "first_name": n, "code": "1"} for n in ("A", "B")]
    campaign = make(post(api, recipients=people, allow_duplicates=True))
    assert sorted(Message.objects.filter(campaign=campaign).values_list("body", flat=True)) == [
        "Hello A, your code is 1",
        "Hello B, your code is 1",
    ]
    assert campaign.duplicates_skipped == 0


def test_a_plain_body_keeps_its_braces_and_a_template_escapes_them(api):
    campaign = make(
        post(
            api, template="{{literal}} {first_name}", recipients=[{"phone": recipient(1), "first_name": "A"}]
        )
    )
    assert Message.objects.get(campaign=campaign).body == "{literal} A"
    resp = api.post(
        "/v1/campaigns", {"body": "Sale {today}!", "recipients": [{"phone": recipient(2)}]}, format="json"
    )
    campaign = make(resp)
    assert Message.objects.get(campaign=campaign).body == "Sale {today}!"


def test_template_placeholders_are_substituted_never_formatted(api):
    people = [{"phone": recipient(1), "first_name": "{code.__class__}", "code": "x"}]
    campaign = make(post(api, recipients=people))
    assert Message.objects.get(campaign=campaign).body == "Hello {code.__class__}, your code is x"
    resp = post(api, template="Hi {first_name.__class__}", recipients=people)
    assert resp.status_code == 400 and "template" in fields_of(resp)


# --- time: recipients' own zones across a DST change ----------------------------------------------------


def _next_us_dst_start() -> date:
    """The second Sunday of March (US clocks go forward at 02:00) after tomorrow."""
    year = timezone.now().year
    while True:
        first = date(year, 3, 1)
        second_sunday = first + timedelta(days=(6 - first.weekday()) % 7 + 7)
        if second_sunday > (timezone.now() + timedelta(days=2)).date():
            return second_sunday
        year += 1


def allow_countries(api, *codes: str) -> None:
    """Destination guards allow only the tenant's own country by default (delivery.guards.destinations)."""
    api.tenant.allowed_countries = list(codes)
    api.tenant.save(update_fields=["allowed_countries"])


def test_recipient_local_time_in_three_zones_across_a_dst_change(api):
    allow_countries(api, "US", "GB", "AU")
    day = _next_us_dst_start()
    people = [
        {"phone": NEW_YORK, "timezone": "America/New_York", "first_name": "Ny", "code": "1"},
        {"phone": LONDON, "first_name": "Lo", "code": "2"},
        {"phone": SYDNEY, "first_name": "Sy", "code": "3"},
        {"phone": AU_MOBILE, "first_name": "Au", "code": "4"},
    ]
    resp = post(
        api,
        recipients=people,
        send_at=f"{day.isoformat()}T02:30:00",
        time_mode="recipient_local",
        timezone="Europe/Berlin",
    )
    campaign = make(resp)
    assert campaign.time_mode == "recipient_local" and campaign.messages_made == 4
    by_to = {m.to: m for m in Message.objects.filter(campaign=campaign)}
    at = lambda d, h, m: datetime(d.year, d.month, d.day, h, m, tzinfo=UTC)  # noqa: E731
    # New York: 02:30 does not exist that night (02:00 -> 03:00 EDT): moved on by the gap, 03:30 EDT.
    assert by_to[NEW_YORK].due_at == at(day, 7, 30)
    assert by_to[NEW_YORK].dst_adjustment == "gap_shifted_forward"
    # London is still on GMT (Europe changes at the end of March).
    assert by_to[LONDON].due_at == at(day, 2, 30)
    # Sydney is on daylight time (AEDT, UTC+11) until April: the evening before in UTC.
    assert by_to[SYDNEY].due_at == at(day - timedelta(days=1), 15, 30)
    # Several zones for the number: the campaign's default zone (Berlin, CET, UTC+1).
    assert by_to[AU_MOBILE].due_at == at(day, 1, 30)
    sources = {
        e.message.to: (e.details["timezone"], e.details["timezone_source"])
        for e in MessageEvent.objects.filter(message__campaign=campaign, kind="created").select_related(
            "message"
        )
    }
    assert sources == {
        NEW_YORK: ("America/New_York", "row"),
        LONDON: ("Europe/London", "number"),
        SYDNEY: ("Australia/Sydney", "number"),
        AU_MOBILE: ("Europe/Berlin", "default"),
    }
    assert {m.requested_timezone for m in by_to.values()} == {
        "America/New_York",
        "Europe/London",
        "Australia/Sydney",
        "Europe/Berlin",
    }


def test_local_time_in_one_zone_and_quiet_hours_in_the_recipients_zone(api):
    allow_countries(api, "GB")
    people = [{"phone": LONDON, "first_name": "Lo", "code": "1"}]
    # 23:00 in London is inside the request's quiet window: moved to its end, 08:00 London.
    campaign = make(
        post(
            api,
            recipients=people,
            send_at=tomorrow_at(23),
            timezone="Europe/London",
            quiet_hours={"start": "21:00", "end": "08:00"},
        )
    )
    m = Message.objects.get(campaign=campaign)
    london = ZoneInfo("Europe/London")
    asked = datetime.fromisoformat(tomorrow_at(23)).replace(tzinfo=london)
    assert campaign.time_mode == "local"
    assert m.quiet_deferred_from == asked.astimezone(UTC)
    assert m.due_at == datetime.combine(asked.date() + timedelta(days=1), time(8), tzinfo=london).astimezone(
        UTC
    )
    assert m.quiet_timezone == "Europe/London"


# --- opt-outs, idempotency, resumed job --------------------------------------------------------------


def test_a_suppressed_recipient_is_skipped_and_reported(api):
    suppression.suppression_add(tenant_id=api.tenant.pk, number=recipient(2), source="api")
    people = [{"phone": recipient(i), "first_name": "A", "code": "1"} for i in range(1, 4)]
    campaign = make(post(api, recipients=people))
    assert sorted(Message.objects.filter(campaign=campaign).values_list("to", flat=True)) == [
        recipient(1),
        recipient(3),
    ]
    assert errors_of(campaign) == [(2, "phone", "opted_out")]
    assert (campaign.recipients_skipped, campaign.rows_rejected) == (1, 0)


def test_idempotent_repeat_returns_the_campaign_and_a_different_body_is_422(api):
    people = [{"phone": recipient(1), "first_name": "A", "code": "1"}]
    first = api.post(
        "/v1/campaigns",
        {"template": "Hi {first_name}", "recipients": people},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )
    again = api.post(
        "/v1/campaigns",
        {"template": "Hi {first_name}", "recipients": people},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )
    assert first.status_code == 202 and again.status_code == 200
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    other = api.post(
        "/v1/campaigns",
        {"template": "Hi {first_name}!", "recipients": people},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )
    assert other.status_code == 422
    assert Campaign.objects.count() == 1


def worker_killed_on_the_second_batch(monkeypatch):
    """The creation job's worker dies inside its second batch (before that batch commits). Returns the
    real birth path, to put back for the job's next run."""
    real_birth = make_module.messages_birth
    calls = {"n": 0}

    def dies_on_the_second_batch(rows, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise SystemExit("worker killed")
        return real_birth(rows, **kwargs)

    monkeypatch.setattr(make_module, "messages_birth", dies_on_the_second_batch)
    return real_birth


def test_a_resumed_job_makes_no_duplicates(api, monkeypatch, settings):
    """The worker dies after the first batch committed: the job runs again from its checkpoint."""
    settings.CAMPAIGN_BATCH_SIZE = 3
    people = [{"phone": recipient(i), "first_name": "A", "code": str(i)} for i in range(10)]
    resp = post(api, recipients=people)
    campaign = Campaign.objects.get(public_id=resp.json()["id"])
    real_birth = worker_killed_on_the_second_batch(monkeypatch)
    with pytest.raises(SystemExit):
        campaign_make(campaign.pk)
    campaign.refresh_from_db()
    assert (campaign.status, campaign.recipients_total, campaign.messages_made) == ("creating", 3, 3)
    monkeypatch.setattr(make_module, "messages_birth", real_birth)
    campaign_make(campaign.pk)
    campaign_make(campaign.pk)  # a redelivered task after the end: nothing more
    campaign.refresh_from_db()
    assert campaign.status == "active" and campaign.messages_made == 10
    assert campaign.duplicates_skipped == 0 and not CampaignError.objects.filter(campaign=campaign).exists()
    assert sorted(Message.objects.filter(campaign=campaign).values_list("to", flat=True)) == sorted(
        recipient(i) for i in range(10)
    )


def test_a_rerun_over_made_rows_counts_them_as_existing_not_as_new(api):
    """The checkpoint lost (or a job run twice at once): the unique key keeps one message each."""
    people = [{"phone": recipient(i), "first_name": "A", "code": "1"} for i in range(4)]
    resp = post(api, recipients=people)
    campaign = Campaign.objects.get(public_id=resp.json()["id"])
    uploads = list(CampaignUpload.objects.filter(campaign=campaign).values_list("seq", "data"))
    campaign_make(campaign.pk)
    # As if nothing had been recorded: the list back, the campaign creating from line 1.
    CampaignUpload.objects.bulk_create([CampaignUpload(campaign=campaign, seq=s, data=d) for s, d in uploads])
    Campaign.objects.filter(pk=campaign.pk).update(status="creating", recipients_total=0, messages_made=0)
    CampaignRange.objects.filter(campaign=campaign).delete()
    campaign_make(campaign.pk)
    campaign.refresh_from_db()
    assert Message.objects.filter(campaign=campaign).count() == 4
    assert (campaign.messages_made, campaign.duplicates_skipped) == (0, 4)


def test_a_second_run_of_a_job_stops_when_another_run_is_ahead_of_it(api, monkeypatch, settings):
    """A re-published task ran beside the first: the one behind stops instead of counting rows twice."""
    settings.CAMPAIGN_BATCH_SIZE = 2
    people = [{"phone": recipient(i), "first_name": "A", "code": "1"} for i in range(6)]
    campaign = Campaign.objects.get(public_id=post(api, recipients=people).json()["id"])
    real_birth = make_module.messages_birth

    def another_run_commits_too(rows, **kwargs):
        # As if the other run had committed the same two rows first (its checkpoint moved on).
        CampaignRange.objects.filter(campaign=campaign).update(position=F("position") + 2)
        return real_birth(rows, **kwargs)

    monkeypatch.setattr(make_module, "messages_birth", another_run_commits_too)
    report = campaign_make(campaign.pk)
    assert report.stopped == "superseded" and report.made == 2
    assert Message.objects.filter(campaign=campaign).count() == 2


def test_a_creating_campaign_without_progress_is_published_again(api, monkeypatch):
    published = []
    monkeypatch.setattr("scheduling.campaigns.service.campaign_make_enqueue", published.append)
    people = [{"phone": recipient(1), "first_name": "A", "code": "1"}]
    stuck = Campaign.objects.get(public_id=post(api, recipients=people).json()["id"])
    fresh = Campaign.objects.get(public_id=post(api, recipients=people, name="fresh").json()["id"])
    Campaign.objects.filter(pk=stuck.pk).update(updated_at=timezone.now() - timedelta(minutes=10))
    assert make_module.campaigns_stale_republish() == [stuck.pk]
    assert published == [stuck.pk]
    assert make_module.campaigns_stale_republish() == []  # not again before another stale period
    assert fresh.pk not in published


def test_a_cancelled_campaign_makes_nothing_more(api):
    people = [{"phone": recipient(i), "first_name": "A", "code": "1"} for i in range(4)]
    resp = post(api, recipients=people)
    Campaign.objects.filter(public_id=resp.json()["id"]).update(status="cancelled")
    campaign = Campaign.objects.get(public_id=resp.json()["id"])
    report = campaign_make(campaign.pk)
    assert report.stopped == "cancelled" and report.made == 0
    assert not Message.objects.filter(campaign=campaign).exists()


def test_a_campaign_paused_while_creating_stops_its_job_and_resume_continues_it(
    api, settings, django_capture_on_commit_callbacks
):
    settings.CAMPAIGN_BATCH_SIZE = 2
    people = [{"phone": recipient(i), "first_name": "A", "code": str(i)} for i in range(5)]
    campaign = Campaign.objects.get(public_id=post(api, recipients=people).json()["id"])
    assert api.post(f"/v1/campaigns/{campaign.public_id}/pause").status_code == 200
    report = campaign_make(campaign.pk)  # the job's task arrives after the pause
    assert report.stopped == "paused" and report.made == 0
    assert CampaignUpload.objects.filter(campaign=campaign).exists()  # kept for the resume
    with django_capture_on_commit_callbacks() as callbacks:
        resp = api.post(f"/v1/campaigns/{campaign.public_id}/resume")
    assert resp.status_code == 200 and resp.json()["status"] == "creating"
    # The resume publishes the job again (here: run in this process, as the worker would).
    assert any("campaign_make_enqueue" in c.__code__.co_freevars for c in callbacks)
    campaign_make(campaign.pk)
    campaign.refresh_from_db()
    assert campaign.status == "active" and campaign.made_at is not None and campaign.messages_made == 5
    assert sorted(Message.objects.filter(campaign=campaign).values_list("to", flat=True)) == sorted(
        recipient(i) for i in range(5)
    )
    assert api.get(f"/v1/campaigns/{campaign.public_id}").json()["progress"] == {"scheduled": 5}


# --- request-level errors store nothing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"template": "Hi {first_name"}, "template"),
        ({"body": "x"}, "body"),  # both body and template
        ({"template": " "}, "template"),
        ({"send_at": "tomorrow"}, "send_at"),
        ({"timezone": "Mars/Olympus", "send_at": "2030-01-01T09:00:00"}, "timezone"),
        ({"send_at": "2030-01-01T09:00:00Z", "time_mode": "recipient_local"}, "send_at"),
        ({"time_mode": "local", "send_at": None}, "send_at"),
        ({"priority": "urgent"}, "priority"),
        ({"validity_seconds": 5}, "validity_seconds"),
        ({"quiet_hours": {"start": "21:00"}}, "quiet_hours"),
        ({"from": "not a sender!"}, "from"),
        ({"recipients": []}, "recipients"),
        ({"recipients": [["+14155550123"]]}, "recipients"),
        ({"recipients": "+14155550123"}, "recipients"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_request_level_errors_are_400_naming_the_field_and_store_nothing(api, fields, field):
    body = {
        "template": "Hi {first_name}",
        "recipients": [{"phone": recipient(1), "first_name": "A"}],
        **fields,
    }
    body = {k: v for k, v in body.items() if v is not None}
    resp = api.post("/v1/campaigns", body, format="json")
    assert resp.status_code == 400, resp.content
    assert any(k == field or k.startswith(f"{field}.") for k in fields_of(resp)), fields_of(resp)
    assert not Campaign.objects.exists() and not CampaignUpload.objects.exists()


@pytest.mark.parametrize(
    ("csv_text", "why"),
    [
        ("number,first_name,code\n+14155550123,A,1\n", "no 'phone' column"),
        ("phone,first_name\n+14155550123,A\n", "'code'"),
        ("", "empty"),
    ],
)
def test_a_csv_header_without_phone_or_a_variable_is_400_and_stores_nothing(api, csv_text, why):
    resp = upload(api, csv_text)
    assert resp.status_code == 400, resp.content
    assert why in fields_of(resp)["recipients"][0]
    assert not Campaign.objects.exists() and not CampaignUpload.objects.exists()


CSV = "phone,first_name,code\n+14155550123,A,1\n"
DEEP_METADATA = '{"a":' * 40 + "1" + "}" * 40  # past MAX_JSON_DEPTH, as in a JSON body
DEEPEST_METADATA = "[" * 100_000 + "]" * 100_000  # past json's recursion limit: a 500 before


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"validity_seconds": "\u00b2"}, "validity_seconds"),  # isdigit() True, int() raises: a 500 before
        ({"validity_seconds": "\u0661\u0662\u0660"}, "validity_seconds"),  # int() read 120: accepted before
        ({"validity_seconds": "\uff11\uff12\uff10"}, "validity_seconds"),
        ({"metadata": DEEP_METADATA}, "metadata"),
        ({"metadata": DEEPEST_METADATA}, "metadata"),
        ({"quiet_hours": DEEPEST_METADATA}, "quiet_hours"),
        ({"metadata": '{"n": 1e400}'}, "metadata"),
    ],
    ids=["superscript", "arabic-indic", "full-width", "deep", "deepest", "deepest-quiet-hours", "infinity"],
)
def test_an_upload_form_field_in_unicode_digits_or_nested_too_deep_is_400_naming_it(api, form, field):
    resp = upload(api, CSV, **form)
    assert resp.status_code == 400, resp.content
    assert field in fields_of(resp), fields_of(resp)
    assert not Campaign.objects.exists() and not CampaignUpload.objects.exists()


def test_an_upload_form_with_ascii_digits_and_shallow_metadata_is_accepted(api):
    resp = upload(api, CSV, validity_seconds="3600", metadata='{"order": {"id": "A-1"}}')
    assert resp.status_code == 202, resp.content


def test_a_form_without_the_file_part_is_400(api):
    resp = api.post("/v1/campaigns", {"template": "Hi {first_name}", "recipients": "x"}, format="multipart")
    assert resp.status_code == 400 and "recipients" in fields_of(resp)
    assert not Campaign.objects.exists()


def test_quota_exhausted_refuses_the_campaign_with_429(api):
    api.tenant.max_pending_scheduled = 1
    api.tenant.save()
    post(api, recipients=[{"phone": recipient(1), "first_name": "A", "code": "1"}])
    make(post(api, recipients=[{"phone": recipient(1), "first_name": "A", "code": "1"}]))
    resp = post(api, recipients=[{"phone": recipient(2), "first_name": "A", "code": "1"}])
    assert resp.status_code == 429 and resp.json()["error"]["quota"] == "max_pending_scheduled"
    assert Campaign.objects.count() == 2


def test_each_made_message_is_booked_in_its_days_quota_window_even_beyond_the_quota(api):
    api.tenant.daily_message_quota = 3
    api.tenant.save()
    people = [{"phone": recipient(i), "first_name": "A", "code": "1"} for i in range(5)]
    campaign = make(post(api, recipients=people))
    assert campaign.messages_made == 5
    due = Message.objects.filter(campaign=campaign).values_list("due_at", flat=True).first()
    window = QuotaWindow.objects.get(tenant=api.tenant, day=quotas.window_day(api.tenant, due))
    assert window.booked == 5  # the sweep defers or fails what is over by the tenant's policy
    # The window of that day is now full: a new campaign for it is refused at acceptance.
    resp = post(api, recipients=people)
    assert resp.status_code == 429 and resp.json()["error"]["quota"] == "daily_message_quota"


# --- reads and tenant scoping -------------------------------------------------------------------------


def test_messages_list_filters_by_status_and_pages(api):
    people = [{"phone": recipient(i), "first_name": "A", "code": "1"} for i in range(3)]
    campaign = make(post(api, recipients=people))
    page = api.get(f"/v1/campaigns/{campaign.public_id}/messages", {"page_size": 2}).json()
    assert len(page["results"]) == 2 and page["next"]
    assert {m["status"] for m in page["results"]} == {"scheduled"}
    assert api.get(f"/v1/campaigns/{campaign.public_id}/messages", {"status": "sent"}).json()["results"] == []
    resp = api.get(f"/v1/campaigns/{campaign.public_id}/messages", {"status": "bogus"})
    assert resp.status_code == 400 and "status" in fields_of(resp)
    listed = api.get("/v1/campaigns").json()["results"]
    assert [c["id"] for c in listed] == [campaign.public_id] and listed[0]["progress"] == {"scheduled": 3}


def test_another_tenants_campaign_is_404(api):
    campaign = make(post(api, recipients=[{"phone": recipient(1), "first_name": "A", "code": "1"}]))
    _, other_key = tenant_with_key("other")
    other = api.__class__()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    for path in ("", "/messages", "/errors"):
        assert other.get(f"/v1/campaigns/{campaign.public_id}{path}").status_code == 404
    assert other.get("/v1/campaigns").json()["results"] == []


def test_a_csv_upload_has_its_own_size_cap_and_json_keeps_the_api_cap(api, settings):
    pad = "x" * 160
    rows = "".join(f"{recipient(i)},N{i}{pad},{i}\n" for i in range(6_000))
    big = "phone,first_name,code\n" + rows  # about 1.1 MB: over the API's 1 MiB, under the upload cap
    assert len(big) > settings.API_MAX_BODY_BYTES
    campaign = make(upload(api, big))
    assert campaign.messages_made == 6_000 and campaign.source_bytes == len(big)
    settings.CAMPAIGN_MAX_UPLOAD_BYTES = 100_000
    resp = upload(api, big)
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"
    people = [{"phone": recipient(i), "first_name": "x" * 20, "code": "1"} for i in range(30_000)]
    resp = post(api, recipients=people)
    assert resp.status_code == 413
    assert Campaign.objects.count() == 1


def test_nul_in_a_form_field_or_a_recipient_is_400_and_a_nul_in_the_file_is_a_bad_row(api):
    resp = upload(api, "phone,first_name,code\n", name="x\x00y")
    assert resp.status_code == 400 and "name" in fields_of(resp)
    resp = post(api, recipients=[{"phone": recipient(1), "first_name": "A\x00", "code": "1"}])
    assert resp.status_code == 400 and "recipients" in fields_of(resp)
    assert not Campaign.objects.exists()
    campaign = make(upload(api, f"phone,first_name,code\n{recipient(1)},A\x00,1\n{recipient(2)},B,2\n"))
    assert errors_of(campaign) == [(2, "row", "invalid_row")]
    assert list(Message.objects.filter(campaign=campaign).values_list("to", flat=True)) == [recipient(2)]


def test_a_refused_destination_is_skipped_and_reported_with_the_guards_code(api):
    """Destination guards (delivery.guards.destinations) apply per recipient: a number outside the tenant's
    allowed countries and one in a premium-rate range become error lines; the rest are made."""
    people = [
        {"phone": recipient(1), "first_name": "Us", "code": "1"},
        {"phone": LONDON, "first_name": "Uk", "code": "2"},  # GB: not allowed (the tenant is US)
        {"phone": "+19005550123", "first_name": "Pr", "code": "3"},  # US 900: premium rate
    ]
    campaign = make(post(api, recipients=people))
    assert list(Message.objects.filter(campaign=campaign).values_list("to", flat=True)) == [recipient(1)]
    assert errors_of(campaign) == [
        (2, "phone", "country_not_allowed"),
        (3, "phone", "premium_rate_destination"),
    ]
    assert (campaign.messages_made, campaign.recipients_skipped) == (1, 2)
