"""Opt-outs (docs/guards.md): STOP/START through signed inbound webhooks (stored, then acted on by the
inbound processor, each answered with its confirmation), 21610 from the sandbox, the list enforced at
acceptance (a 400 naming `to`) and at execution (cancelled, reason opted_out, never submitted), every
change audited with its source. Real sandbox, real Twilio adapter, real database."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from twilio.request_validator import RequestValidator

from delivery.guards import suppression
from delivery.models import Attempt, Suppression, SuppressionChange
from delivery.sending import worker as sending
from inbound.process import inbound_process_due
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.console.roles import roles_sync
from tests.factories import SENDER, message, recipient, sender_for, tenant_with_key

# SQLite half too: suppression's upsert has a SQLite form.
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
PUBLIC = "https://sms.example.com"
INBOUND = f"{PUBLIC}/inbound/twilio/"
SERVICE = "MG" + "a" * 32


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")


@pytest.fixture
def api(tenant):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant[1]}")
    return client


@pytest.fixture
def signed(settings, adapter):
    settings.SMSGW_PUBLIC_BASE_URL = PUBLIC

    def post(params: dict, *, tamper: dict | None = None):
        """The signed webhook, then the inbound processor's pass (what the ``inbound`` queue does)."""
        signature = RequestValidator(settings.TWILIO_AUTH_TOKEN).compute_signature(INBOUND, params)
        answer = Client().post(
            "/inbound/twilio/", {**params, **(tamper or {})}, HTTP_X_TWILIO_SIGNATURE=signature
        )
        inbound_process_due()
        return answer

    return post


def inbound(body: str, frm: str, to: str = SENDER, **extra) -> dict:
    return {
        "MessageSid": f"SM{secrets.token_hex(16)}",  # each message its own, as Twilio gives them
        "AccountSid": "AC" + "0" * 32,
        "From": frm,
        "To": to,
        "Body": body,
        "NumMedia": "0",
        **extra,
    }


def queued(tenant, to: str) -> Message:
    msg = message(tenant, to=to)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    return msg


def post_message(api, to: str, **extra):
    return api.post("/v1/messages", {"to": to, "body": "hi", **extra}, format="json")


def test_stop_then_start_through_signed_inbound_webhooks(signed, tenant, api):
    t, _ = tenant
    to = recipient(1)
    resp = signed(inbound("  sToP ", to))
    assert resp.status_code == 200 and b"<Response>" in resp.content
    entry = Suppression.objects.get()
    assert (entry.tenant_id, entry.number, entry.sender, entry.source) == (
        t.pk,
        to,
        SENDER,
        "inbound_keyword",
    )

    # The confirmation goes to the contact past the opt-out it confirms; nothing else may.
    confirmation = Message.objects.get()
    assert confirmation.exempt_suppression and confirmation.to == to
    refused = post_message(api, to)
    assert refused.status_code == 400 and "to" in refused.json()["error"]["fields"], refused.content
    assert Message.objects.count() == 1

    assert signed(inbound("START", to)).status_code == 200
    assert not Suppression.objects.exists()
    assert post_message(api, to).status_code == 201

    changes = list(
        SuppressionChange.objects.order_by("id").values_list("action", "source", "keyword", "actor")
    )
    assert changes == [
        ("added", "inbound_keyword", "STOP", "recipient"),
        ("removed", "inbound_keyword", "START", "recipient"),
    ]


@pytest.mark.parametrize("word", ["STOPALL", "unsubscribe", "Cancel", "END", "quit"])
def test_every_stop_keyword_suppresses(signed, tenant, word):
    signed(inbound(word, recipient(2)))
    assert Suppression.objects.filter(number=recipient(2), sender=SENDER).exists()


def test_only_the_whole_message_counts_and_help_is_recorded(signed, tenant):
    assert signed(inbound("stop it please", recipient(3))).status_code == 200
    assert signed(inbound("help", recipient(3))).status_code == 200
    assert not Suppression.objects.exists()
    assert list(SuppressionChange.objects.values_list("action", "keyword")) == [("help", "HELP")]


def test_unsigned_or_tampered_inbound_writes_nothing(signed, tenant):
    assert Client().post("/inbound/twilio/", inbound("STOP", recipient(4))).status_code == 403
    assert signed(inbound("HELLO", recipient(4)), tamper={"Body": "STOP"}).status_code == 403
    assert not Suppression.objects.exists() and not SuppressionChange.objects.exists()


def test_stop_to_a_messaging_service_suppresses_that_service_only(signed, tenant, api):
    t, _ = tenant
    to = recipient(5)
    signed(inbound("STOP", to, to="+14155550177", MessagingServiceSid=SERVICE))
    assert not Suppression.objects.exists()  # no tenant owns this service: nobody's list
    sender_for(t, SERVICE)  # the operator assigns it to the tenant (smsgw.tenancy.senders)
    signed(inbound("STOP", to, to="+14155550177", MessagingServiceSid=SERVICE))
    assert Suppression.objects.get().sender == SERVICE
    refused = post_message(api, to, messaging_service_sid=SERVICE)
    assert refused.status_code == 400 and "suppression" in refused.json()["error"]["message"]
    # The same recipient has not opted out of the tenant's own number.
    assert post_message(api, to).status_code == 201


def test_tenant_wide_entry_blocks_every_sender(tenant, api):
    t, _ = tenant
    sender_for(t, SERVICE)
    suppression.suppression_add(tenant_id=t.pk, number=recipient(6), source="api", actor="test")
    assert post_message(api, recipient(6)).status_code == 400
    refused = post_message(api, recipient(6), messaging_service_sid=SERVICE)
    assert refused.status_code == 400 and "suppression" in refused.json()["error"]["message"]
    other, _ = tenant_with_key("other")
    assert not suppression.is_suppressed(
        tenant_id=other.pk, number=recipient(6), from_number=SENDER, sender_pool=""
    )


def test_opted_out_after_acceptance_is_cancelled_at_execution_never_submitted(adapter, sandbox, tenant):
    t, _ = tenant
    msg = queued(t, recipient(7))
    keep = queued(t, recipient(8))
    suppression.suppression_add(tenant_id=t.pk, number=recipient(7), sender=SENDER, source="api")
    report = sending.send_batch([msg.pk, keep.pk])
    assert report.opted_out == 1 and report.claimed == 1
    msg.refresh_from_db()
    assert msg.status == Status.CANCELLED and msg.reason_code == "opted_out"
    event = msg.events.get(kind="cancelled")
    assert (event.from_status, event.to_status) == (Status.QUEUED, Status.CANCELLED)
    assert not Attempt.objects.filter(message=msg).exists()
    assert Message.objects.get(pk=keep.pk).status == Status.SENT


def test_21610_from_the_sandbox_adds_the_recipient_and_later_sends_are_stopped(adapter, sandbox, tenant, api):
    t, _ = tenant
    to = recipient(9)
    sandbox.config(rules=[{"to": to, "action": "400", "error_code": 21610}])
    first = queued(t, to)
    later = queued(t, to)  # accepted before the provider told us
    sending.send_batch([first.pk])
    first.refresh_from_db()
    assert first.status == Status.FAILED and first.reason_code == "opted_out"
    entry = Suppression.objects.get()
    assert (entry.number, entry.sender, entry.source) == (to, SENDER, "provider_error")
    change = SuppressionChange.objects.get()
    assert (change.action, change.source, change.actor) == ("added", "provider_error", "provider:twilio")

    sending.send_batch([later.pk])
    later.refresh_from_db()
    assert later.status == Status.CANCELLED and later.reason_code == "opted_out"
    assert Attempt.objects.filter(message=later).count() == 0
    assert post_message(api, to).status_code == 400


def test_operator_adds_and_removes_in_the_admin_audited(tenant):
    t, _ = tenant
    roles_sync(apps)
    user = User.objects.create_user("op", "op@example.com", "pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client()
    client.force_login(user)
    resp = client.post(
        "/admin/delivery/suppression/add/", {"tenant": t.pk, "number": recipient(10), "sender": ""}
    )
    assert resp.status_code == 302, resp.content
    entry = Suppression.objects.get()
    assert entry.source == "operator"
    page = client.get("/admin/delivery/suppression/").content.decode()
    assert recipient(10) not in page  # masked
    resp = client.post(f"/admin/delivery/suppression/{entry.pk}/delete/", {"post": "yes"})
    assert resp.status_code == 302
    assert not Suppression.objects.exists()
    assert list(SuppressionChange.objects.order_by("id").values_list("action", "source", "actor")) == [
        ("added", "operator", "admin:op"),
        ("removed", "operator", "admin:op"),
    ]
    viewer = set(Group.objects.get(name="viewer").permissions.values_list("codename", flat=True))
    assert {"view_suppression", "view_suppressionchange"} <= viewer and "add_suppression" not in viewer


def test_api_add_list_remove_is_tenant_scoped_and_audited(tenant, api):
    t, _ = tenant
    resp = api.post("/v1/suppressions", {"number": "+1 415 200 0011"}, format="json")
    assert resp.status_code == 201 and resp.json()["number"] == recipient(11) and resp.json()["sender"] == ""
    assert api.post("/v1/suppressions", {"number": recipient(11)}, format="json").status_code == 200
    assert post_message(api, recipient(11)).status_code == 400

    _, other_key = tenant_with_key("other")
    other_api = APIClient()
    other_api.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    assert other_api.get("/v1/suppressions").json()["results"] == []
    assert other_api.delete(f"/v1/suppressions?number=%2B{recipient(11)[1:]}").status_code == 404
    assert post_message(other_api, recipient(11)).status_code == 201

    listed = api.get("/v1/suppressions").json()["results"]
    assert [(e["number"], e["source"]) for e in listed] == [(recipient(11), "api")]
    assert api.delete(f"/v1/suppressions?number=%2B{recipient(11)[1:]}").status_code == 204
    assert post_message(api, recipient(11)).status_code == 201
    changes = SuppressionChange.objects.filter(tenant=t).order_by("id")
    assert [(c.action, c.source) for c in changes] == [("added", "api"), ("removed", "api")]
    assert all(c.actor for c in changes)


def test_a_schedule_for_a_suppressed_recipient_is_made_and_its_occurrences_cancelled(
    adapter, sandbox, tenant, api
):
    t, _ = tenant
    suppression.suppression_add(tenant_id=t.pk, number=recipient(12), sender=SENDER, source="api")
    start = (timezone.now() + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    body = {"to": recipient(12), "body": "Take your medicine", "rrule": "FREQ=HOURLY", "start": start}
    resp = api.post("/v1/schedules", {**body, "timezone": "UTC"}, format="json")
    assert resp.status_code == 201, resp.content
    occurrences = list(Message.objects.filter(tenant=t, to=recipient(12)).order_by("due_at"))
    assert occurrences
    first = occurrences[0]
    transitions.transition(first.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    sending.send_batch([first.pk])
    first.refresh_from_db()
    assert first.status == Status.CANCELLED and first.reason_code == "opted_out"
    assert not Attempt.objects.filter(message=first).exists()


def test_changes_and_stopped_messages_are_counted(
    signed, adapter, sandbox, tenant, api, settings, django_capture_on_commit_callbacks
):
    from tests.metrics import TOKEN, scrape, value

    settings.METRICS_TOKEN = TOKEN
    t, _ = tenant
    queued_before = queued(t, recipient(13))
    before = scrape()
    with django_capture_on_commit_callbacks(execute=True):
        signed(inbound("STOP", recipient(13)))
        signed(inbound("HELP", recipient(13)))
        assert post_message(api, recipient(13)).status_code == 400
        sending.send_batch([queued_before.pk])
    after = scrape()

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("smsgw_suppression_changes_total", action="added", source="inbound_keyword") == 1
    assert delta("smsgw_suppression_changes_total", action="help", source="inbound_keyword") == 1
    assert delta("smsgw_opted_out_stopped_total", stage="acceptance") == 1
    assert delta("smsgw_opted_out_stopped_total", stage="execution") == 1


def test_changing_a_scheduled_message_to_a_suppressed_recipient_is_a_400_naming_to(tenant, api):
    t, _ = tenant
    suppression.suppression_add(tenant_id=t.pk, number=recipient(14), source="api")
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    mid = post_message(api, recipient(15), send_at=later).json()["id"]
    resp = api.patch(f"/v1/messages/{mid}", {"to": recipient(14)}, format="json")
    assert resp.status_code == 400 and "to" in resp.json()["error"]["fields"], resp.content
    assert Message.objects.get(public_id=mid).to == recipient(15)
