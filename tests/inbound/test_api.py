"""The pull API for replies (docs/inbound.md): a tenant sees its own replies only, filtered and paged; a
conversation is the pair's outbound and inbound messages in order, paged without loss or repeat, and its
outbound side needs messages:read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from inbound.process import inbound_process_due
from scheduling.models import Message, Status
from smsgw.tenancy.api_keys import api_key_create
from tests.factories import SENDER, message, recipient, sender_for, tenant_with_key
from tests.inbound.helpers import configure, twilio_form, twilio_post

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
CONTACT = recipient(11)
OTHER_NUMBER = "+14155550177"


@pytest.fixture(autouse=True)
def signed(settings):
    configure(settings)


def client_for(tenant, scopes) -> APIClient:
    _, raw = api_key_create(tenant=tenant, name="t", scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def sent(tenant, minutes_ago: float, body: str, to: str = CONTACT) -> Message:
    msg = message(tenant, to=to, body=body, status=Status.DELIVERED)
    Message.objects.filter(pk=msg.pk).update(sent_at=timezone.now() - timedelta(minutes=minutes_ago))
    return msg


def reply(body: str, frm: str = CONTACT, to: str = SENDER) -> None:
    assert twilio_post(twilio_form(body, frm, to)).status_code == 200
    inbound_process_due()


def test_each_tenant_lists_only_its_own_replies_with_filters():
    acme, _ = tenant_with_key("acme")
    other, _ = tenant_with_key("other", default_from=OTHER_NUMBER)
    sender_for(other, OTHER_NUMBER, shared=False)
    reply("one")
    reply("two", frm=recipient(12))
    reply("not yours", to=OTHER_NUMBER)
    api = client_for(acme, ["inbound:read"])
    bodies = [r["body"] for r in api.get("/v1/inbound").json()["results"]]
    assert bodies == ["two", "one"]  # newest first, and nothing of the other tenant's
    assert [r["body"] for r in api.get("/v1/inbound", {"from": CONTACT}).json()["results"]] == ["one"]
    theirs = client_for(other, ["inbound:read"]).get("/v1/inbound").json()["results"]
    assert [r["body"] for r in theirs] == ["not yours"]
    # Another tenant's id is not found, as an unknown one.
    assert api.get(f"/v1/inbound/{theirs[0]['id']}").status_code == 404
    bad = api.get("/v1/inbound", {"received_before": "soon"})
    assert bad.status_code == 400 and "received_before" in bad.json()["error"]["fields"]


def test_a_conversation_pages_both_directions_in_order_without_loss_or_repeat():
    acme, _ = tenant_with_key("acme")
    for i in range(3):
        sent(acme, 30 - i * 10, f"out {i}")
        reply(f"in {i}")
    sent(acme, 1, "unrelated", to=recipient(13))
    api = client_for(acme, ["inbound:read", "messages:read"])
    seen, url = [], f"/v1/conversations/{CONTACT}?page_size=2"
    while url:
        page = api.get(url).json()
        seen += [(i["direction"], i["body"]) for i in page["results"]]
        url = page["next"]
    # Sent 30, 20 and 10 minutes ago; the replies came now, in the order they came.
    assert seen == [("outbound", f"out {i}") for i in range(3)] + [("inbound", f"in {i}") for i in range(3)]


def test_a_conversations_outbound_side_needs_messages_read():
    acme, _ = tenant_with_key("acme")
    sent(acme, 5, "reminder")
    reply("ok")
    only_inbound = client_for(acme, ["inbound:read"]).get(f"/v1/conversations/{CONTACT}").json()["results"]
    assert [i["direction"] for i in only_inbound] == ["inbound"]
    none = client_for(acme, ["messages:read"]).get(f"/v1/conversations/{CONTACT}")
    assert none.status_code == 403
