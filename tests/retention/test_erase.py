"""POST /v1/recipients/erase: every trace of one number gone from one tenant's data (messages live and in
history, schedules, campaign rows, webhook deliveries, receipts, opt-out signals), its pending messages
cancelled, its opt-out still in force, another tenant's data untouched, audited without the number; a
repeat changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.guards.suppression import suppression_add
from delivery.models import OptOutSignal, Suppression
from receipts.models import WebhookDelivery
from retention.content import masked
from retention.erase import COUNTS
from retention.models import MessageHistory, RetentionAction, RetentionAudit
from scheduling.campaigns.models import CampaignError, CampaignUpload
from scheduling.lifecycle import transitions
from scheduling.models import Campaign, Message, Schedule, ScheduleStatus, ScheduleVersion, Status
from tests.factories import RECIPIENT, message, tenant_with_key
from tests.retention.records import copies_make, history_make, quotes

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

OTHER_NUMBER = "+12025550143"


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _erase(key: str, to: object = RECIPIENT):
    return _api(key).post("/v1/recipients/erase", {"to": to}, format="json")


def _soon(hours: float = 2) -> str:
    at = timezone.now() + timedelta(hours=hours)
    return at.replace(second=0, microsecond=0, tzinfo=None).isoformat()


@pytest.fixture
def world(db):
    """Two tenants with the same person's number everywhere, and another number beside it."""
    tenant, key = tenant_with_key("acme")
    other, other_key = tenant_with_key("other")
    made = {"tenant": tenant, "key": key, "other": other}
    made["final"] = message(tenant, status=Status.DELIVERED, body="secret code 1234")
    made["failed"] = message(tenant, status=Status.FAILED, body="secret code 5678")
    made["scheduled"] = message(tenant, status=Status.SCHEDULED, due_in=3600, body="later")
    made["sending"] = message(tenant, status=Status.SENDING, body="on its way")
    made["bystander"] = message(tenant, status=Status.DELIVERED, to=OTHER_NUMBER, body="not theirs")
    made["theirs"] = message(other, status=Status.DELIVERED, body="other tenant's")
    for msg in (made["final"], made["failed"], made["theirs"]):
        copies_make(msg)
    made["history"] = history_make(tenant, pk=800_001, to=RECIPIENT)
    made["their_history"] = history_make(other, pk=800_002, to=RECIPIENT)
    schedule = {"to": RECIPIENT, "body": "Take it", "rrule": "FREQ=HOURLY;INTERVAL=6", "start": _soon(1)}
    made["schedule"] = _api(key).post("/v1/schedules", schedule, format="json").json()["id"]
    made["their_schedule"] = _api(other_key).post("/v1/schedules", schedule, format="json").json()["id"]
    people = [{"phone": RECIPIENT, "first_name": "Ann"}, {"phone": OTHER_NUMBER, "first_name": "Bo"}]
    campaign = {"template": "Hi {first_name}", "send_at": _soon(), "timezone": "UTC", "recipients": people}
    cid = _api(key).post("/v1/campaigns", campaign, format="json").json()["id"]
    made["campaign"] = Campaign.objects.get(public_id=cid)
    CampaignError.objects.create(
        campaign=made["campaign"],
        line=7,
        phone="+1 415-555-0123",
        field="phone",
        code="opted_out",
        message="x",
    )
    for tenant_id in (tenant.pk, other.pk):
        suppression_add(tenant_id=tenant_id, number=RECIPIENT, source="api", actor="test")
    return made


def _state(msg: Message) -> Message:
    return Message.objects.get(pk=msg.pk)


def test_erase_removes_every_trace_and_keeps_the_opt_out(world):
    resp = _erase(world["key"])
    assert resp.status_code == 200, resp.content
    counts = resp.json()["counts"]
    assert set(counts) == set(COUNTS)
    assert counts["messages_cancelled"] >= 1 and counts["messages_in_flight"] == 1
    assert counts["message_history"] == 1 and counts["schedules"] == 1 and counts["campaign_errors"] == 1
    tenant = world["tenant"]

    # final ones: content gone, status kept
    for name, status in (("final", Status.DELIVERED), ("failed", Status.FAILED)):
        msg = _state(world[name])
        assert (msg.status, msg.body, msg.to, msg.metadata) == (status, "", masked(RECIPIENT), {})
    # the pending one: cancelled through the cancel service, then scrubbed
    msg = _state(world["scheduled"])
    assert (msg.status, msg.body, msg.to) == (Status.CANCELLED, "", masked(RECIPIENT))
    assert msg.events.filter(kind="cancelled").exists()
    # the one in the send worker's hands: kept for it, marked to lose its content as soon as it may
    msg = _state(world["sending"])
    assert (msg.status, msg.body, msg.to) == (Status.SENDING, "on its way", RECIPIENT)
    assert (msg.content_retention, msg.address_retention) == ("discard", "obfuscate")
    # nobody else's
    assert _state(world["bystander"]).to == OTHER_NUMBER and _state(world["bystander"]).body == "not theirs"
    theirs = _state(world["theirs"])
    assert (theirs.to, theirs.body) == (RECIPIENT, "other tenant's")
    assert WebhookDelivery.objects.filter(message=theirs, payload__data__to=RECIPIENT).exists()
    assert MessageHistory.objects.get(pk=world["their_history"].pk).to == RECIPIENT
    their_schedule = Schedule.objects.get(public_id=world["their_schedule"])
    assert their_schedule.to == RECIPIENT and their_schedule.status == ScheduleStatus.ACTIVE
    assert OptOutSignal.objects.filter(tenant_id=world["other"].pk, to=RECIPIENT).count() == 1

    # every table of this tenant
    mine = Message.objects.filter(tenant=tenant).exclude(pk=world["sending"].pk)
    assert not mine.filter(to=RECIPIENT).exists()
    for payload in WebhookDelivery.objects.filter(tenant=tenant).values_list("payload", flat=True):
        assert not quotes(payload, RECIPIENT)
    history = MessageHistory.objects.get(pk=world["history"].pk)
    assert history.to == masked(RECIPIENT) and not quotes(history.document, RECIPIENT)
    schedule = Schedule.objects.get(public_id=world["schedule"])
    assert (
        schedule.status == ScheduleStatus.CANCELLED
        and schedule.to == masked(RECIPIENT)
        and schedule.body == ""
    )
    for definition in ScheduleVersion.objects.filter(schedule=schedule).values_list("definition", flat=True):
        assert not quotes(definition, RECIPIENT) and "Take it" not in str(definition)
    assert not Message.objects.filter(schedule=schedule, status=Status.SCHEDULED).exists()
    assert CampaignError.objects.get(campaign=world["campaign"]).phone == masked(RECIPIENT)
    assert not OptOutSignal.objects.filter(tenant_id=tenant.pk, to=RECIPIENT).exists()
    for chunk in CampaignUpload.objects.filter(campaign=world["campaign"]):
        assert (
            not quotes(bytes(chunk.data).decode(), RECIPIENT) and OTHER_NUMBER in bytes(chunk.data).decode()
        )

    # the opt-out stays in force, for both tenants
    assert Suppression.objects.filter(number=RECIPIENT).count() == 2

    audit = RetentionAudit.objects.get()
    assert (audit.tenant_id, audit.action, audit.subject) == (tenant.pk, RetentionAction.ERASE, "")
    assert (
        audit.counts == counts and not quotes(audit.counts, RECIPIENT) and not quotes(audit.actor, RECIPIENT)
    )


def test_a_repeat_is_200_with_zero_counts(world):
    assert _erase(world["key"]).status_code == 200
    again = _erase(world["key"])
    in_flight = again.json()["counts"].pop("messages_in_flight")
    assert again.status_code == 200 and set(again.json()["counts"].values()) == {0}
    assert in_flight == 1, "the message still in the send worker's hands is counted again, marked once"
    assert RetentionAudit.objects.count() == 2


def test_the_message_in_flight_loses_its_body_when_sent_and_its_number_when_final(world):
    _erase(world["key"])
    msg = world["sending"]
    transitions.transition(msg.pk, from_statuses=[Status.SENDING], to_status=Status.SENT, kind="sent")
    assert (_state(msg).body, _state(msg).to) == ("", RECIPIENT)
    transitions.transition(msg.pk, from_statuses=[Status.SENT], to_status=Status.DELIVERED, kind="delivered")
    assert (_state(msg).status, _state(msg).body, _state(msg).to) == (Status.DELIVERED, "", masked(RECIPIENT))
    # and now a repeat finds nothing left
    counts = _erase(world["key"]).json()["counts"]
    assert counts["messages_in_flight"] == 0 and not Message.objects.filter(
        tenant=world["tenant"], to=RECIPIENT
    )


@pytest.mark.parametrize("to", ["+1555", "14155550123", "", 14155550123, None])
def test_a_bad_number_is_a_400_naming_to_and_nothing_changes(world, to):
    resp = _erase(world["key"], to)
    assert resp.status_code == 400, resp.content
    assert "to" in resp.json()["error"]["fields"]
    assert _state(world["final"]).to == RECIPIENT and not RetentionAudit.objects.exists()


def test_an_unknown_field_is_a_400_naming_it(world):
    resp = _api(world["key"]).post("/v1/recipients/erase", {"to": RECIPIENT, "number": "x"}, format="json")
    assert resp.status_code == 400 and "number" in resp.json()["error"]["fields"]
    assert _state(world["final"]).to == RECIPIENT


def test_a_number_straddling_two_upload_chunks_is_masked_in_both(world):
    campaign = world["campaign"]
    CampaignUpload.objects.filter(campaign=campaign).delete()
    text = f"phone,first_name\n{OTHER_NUMBER},Bo\n{RECIPIENT},Ann\n".encode()
    cut = text.index(RECIPIENT.encode()) + 8  # "+1415555" | "0123": the masked digits in both
    CampaignUpload.objects.create(campaign=campaign, seq=0, data=text[:cut])
    CampaignUpload.objects.create(campaign=campaign, seq=1, data=text[cut:])
    counts = _erase(world["key"]).json()["counts"]
    assert counts["campaign_uploads"] == 2
    joined = b"".join(bytes(c.data) for c in CampaignUpload.objects.filter(campaign=campaign).order_by("seq"))
    assert joined == text.replace(RECIPIENT.encode(), masked(RECIPIENT).encode())


def test_copies_of_a_deleted_message_and_of_a_removed_one_are_scrubbed_too(world):
    """A message the tenant deleted through the Twilio API keeps its webhook payloads (message_delete masks
    the row only); a delivery whose message row is gone keeps its payload. Both lose the number."""
    tenant = world["tenant"]
    deleted = world["failed"]
    Message.objects.filter(pk=deleted.pk).update(deleted_at=timezone.now(), to=masked(RECIPIENT), body="")
    orphan = WebhookDelivery.objects.filter(message=world["final"]).first()
    WebhookDelivery.objects.filter(pk=orphan.pk).update(message=None)
    theirs = WebhookDelivery.objects.filter(message=world["theirs"]).first()
    WebhookDelivery.objects.filter(pk=theirs.pk).update(message=None)
    assert _erase(world["key"]).status_code == 200
    for payload in WebhookDelivery.objects.filter(tenant=tenant).values_list("payload", flat=True):
        assert not quotes(payload, RECIPIENT)
    assert quotes(WebhookDelivery.objects.get(pk=theirs.pk).payload, RECIPIENT), "another tenant's"
    # each message whose content went says who removed it
    actor = str(RetentionAudit.objects.get().actor)
    assert list(_state(world["final"]).events.filter(kind="redacted").values_list("actor", flat=True)) == [
        actor
    ]
