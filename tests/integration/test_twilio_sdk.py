"""The official Twilio Python SDK against a live gunicorn (docs/coming-from-twilio.md): a Twilio program
that changes only its credentials and base URL sends, schedules, lists, cancels and redacts through
smsgw; real workers and beat send through the Twilio sandbox, the receipts come back, and the message's
StatusCallback gets Twilio's signed form, which the SDK's own RequestValidator accepts."""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta
from urllib.parse import parse_qsl

import pytest
from django.utils import timezone
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.request_validator import RequestValidator

from scheduling.facade.resources import public_id_of
from scheduling.models import Message, Status
from tests.factories import RECIPIENT, SENDER, messages_bulk, sender_for, tenant_with_key
from tests.harness import start_web
from tests.scheduling.facade.sdk_client import sdk_client
from tests.waiting import wait_for
from tests.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
SERVICE = "MG" + "b" * 32


def _events(base: str, key: str, sid: str) -> list[str]:
    request = urllib.request.Request(
        f"{base}/v1/messages/{sid}/events", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return [e["kind"] for e in json.load(resp)["events"]]


def test_a_twilio_program_sends_schedules_cancels_and_gets_signed_callbacks(pipeline):
    tenant, key = tenant_with_key("acme", allowed_countries=["US", "GB"])
    sender_for(tenant, SERVICE)  # the Messaging Service it schedules through is the tenant's
    receiver = WebhookReceiver().start()
    try:
        base = start_web(pipeline, SMSGW_WEBHOOK_ALLOW_PRIVATE="1", SMSGW_WEBHOOK_ALLOW_HTTP="1")
        pipeline.worker()
        pipeline.beat()
        client = sdk_client(base, tenant.facade_account_sid, key)

        sent = client.messages.create(
            to=RECIPIENT, from_=SENDER, body="your code is 1234", status_callback=receiver.url
        )
        assert sent.status == "queued" and sent.sid.startswith("SM")
        later = timezone.now() + timedelta(hours=2)
        scheduled = client.messages.create(
            to=RECIPIENT, messaging_service_sid=SERVICE, body="later", send_at=later, schedule_type="fixed"
        )
        local = client.messages.create(
            to=RECIPIENT, from_=SENDER, body="9 am London", send_at="2027-03-10T09:00:00[Europe/London]"
        )
        assert scheduled.status == "scheduled" and local.status == "scheduled"
        assert client.messages(local.sid).fetch().status == "scheduled"

        def delivered():
            return client.messages(sent.sid).fetch().status == "delivered"

        pipeline.wait_until(delivered, 90, "the message sent now delivered")
        wait_for(lambda: len(receiver.received) >= 2, 60, "its two status callbacks")
        validator = RequestValidator(tenant.callback_signing_key)
        statuses = []
        for got in receiver.received:
            params = dict(parse_qsl(got["body"]))
            url = f"http://127.0.0.1:{receiver.port}{got['path']}"
            assert validator.validate(url, params, got["headers"]["x-twilio-signature"]), params
            assert params["MessageSid"] == sent.sid and params["AccountSid"] == tenant.facade_account_sid
            statuses.append(params["MessageStatus"])
            tampered = {**params, "To": "+14155550199"}
            assert not validator.validate(url, tampered, got["headers"]["x-twilio-signature"])
        assert sorted(statuses) == ["delivered", "sent"]
        # the same message on /v1/, with the same timeline
        kinds = _events(base, key, sent.sid)
        assert kinds[0] == "created" and "delivered" in " ".join(kinds)

        # cancel before the cut-off, and after it
        assert client.messages(scheduled.sid).update(status="canceled").status == "canceled"
        with pytest.raises(TwilioRestException) as err:
            client.messages(sent.sid).update(status="canceled")
        assert err.value.status == 409 and err.value.code == 30409
        # redact once it has gone
        assert client.messages(sent.sid).update(body="").body == ""
        # refusals
        with pytest.raises(TwilioRestException) as err:
            client.messages.create(to="+1555", from_=SENDER, body="x")
        assert err.value.code == 21211
        with pytest.raises(TwilioRestException) as err:
            sdk_client(base, tenant.facade_account_sid, key + "x").messages.create(
                to=RECIPIENT, from_=SENDER, body="x"
            )
        assert err.value.status == 401 and err.value.code == 20003

        tenant.facade_strict = True
        tenant.save(update_fields=["facade_strict"])
        with pytest.raises(TwilioRestException) as err:
            client.messages.create(
                to=RECIPIENT,
                messaging_service_sid=SERVICE,
                body="x",
                send_at=timezone.now() + timedelta(minutes=10),
                schedule_type="fixed",
            )
        assert err.value.code == 35114
        with pytest.raises(TwilioRestException) as err:
            client.messages.create(to=RECIPIENT, from_=SENDER, body="x", send_at=later, schedule_type="fixed")
        assert err.value.code == 35118

        final = {m.public_id: m for m in Message.objects.all()}
        assert len(final) == 3  # the refusals stored nothing
        assert final[public_id_of(sent.sid)].status == Status.DELIVERED
        assert final[public_id_of(sent.sid)].body == ""
        assert final[public_id_of(scheduled.sid)].status == Status.CANCELLED
        assert final[public_id_of(local.sid)].status == Status.SCHEDULED
    finally:
        receiver.stop()


def test_list_pages_over_2500_messages(pipeline):
    tenant, key = tenant_with_key("acme")
    messages_bulk(tenant, 2500, due_at=timezone.now() + timedelta(days=1))
    base = start_web(pipeline)
    client = sdk_client(base, tenant.facade_account_sid, key)
    listed = client.messages.list(page_size=1000)
    assert len(listed) == 2500 and len({m.sid for m in listed}) == 2500
    assert [public_id_of(m.sid) for m in listed] == list(
        Message.objects.order_by("-id").values_list("public_id", flat=True)
    )
    first = client.messages.page(page_size=1000)
    second = first.next_page()
    third = second.next_page()
    assert [len(list(p)) for p in (first, second, third)] == [1000, 1000, 500]
    assert third.next_page() is None
    assert len(client.messages.list(limit=1200, page_size=1000)) == 1200
    with pytest.raises(TwilioException):
        client.messages.list(page_size=1001)
