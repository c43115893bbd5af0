"""A French STOP through real processes (docs/inbound.md, "Keywords and actions"): gunicorn takes the signed
Twilio reply "Arrêt", a real `celery worker` and `celery beat` store it, opt the contact out, and send the
French confirmation through the normal pipeline to the Twilio sandbox, past the opt-out it confirms;
a new message to the contact is refused at acceptance all the same."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from delivery.models import Suppression
from inbound.models import InboundMessage
from scheduling.models import Message, Status
from tests.factories import SENDER, recipient, tenant_with_key
from tests.harness import start_web
from tests.integration.test_inbound import twilio_reply
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _create(base: str, key: str, to: str) -> int:
    body = json.dumps({"to": to, "body": "Offre du jour"}).encode()
    request = urllib.request.Request(
        f"{base}/v1/messages",
        data=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_french_stop_opts_out_and_its_french_confirmation_is_delivered(pipeline):
    tenant, key = tenant_with_key("acme")
    base = start_web(pipeline)
    pipeline.worker()
    pipeline.beat()
    contact = recipient(21)

    status, params = twilio_reply(base, pipeline.sandbox.auth_token, "Arrêt", contact)
    assert status == 200

    def confirmation() -> Message | None:
        return Message.objects.filter(tenant=tenant, to=contact, exempt_suppression=True).first()

    wait_for(
        lambda: (m := confirmation()) is not None and m.status in (Status.SENT, Status.DELIVERED),
        60,
        "the confirmation submitted to the provider",
    )
    inbound = InboundMessage.objects.get(provider_message_id=params["MessageSid"])
    sent = confirmation()
    assert sent is not None
    assert (inbound.keyword, inbound.action, inbound.action_result["reply"]) == (
        "ARRET",
        "opt_out",
        sent.public_id,
    )
    assert Suppression.objects.filter(tenant=tenant, number=contact, sender=SENDER).exists()
    assert "vous êtes désinscrit" in sent.body and sent.provider_message_id
    assert sent.from_number == SENDER and sent.events.filter(kind="created", actor="keyword").exists()
    # Every other message to the contact from this sender is refused.
    assert _create(base, key, contact) == 400
    assert Message.objects.filter(tenant=tenant, to=contact).count() == 1
