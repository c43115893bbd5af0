"""Inbound in the operator console: a read-only list with the contact masked (filters by state, review,
provider and action; search by id, provider id or number), the unrouted ones on their own page, and the
conversation of a number pair from an inbound message or an outbound one, in time order and paged; every
operator role sees it, nobody changes it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from inbound import admin as inbound_admin
from inbound.models import InboundMessage, InboundState, KeywordAction
from scheduling.models import Message, Status
from smsgw.console.roles import roles_sync
from tests.factories import RECIPIENT, SENDER, message, tenant_with_key
from tests.inbound_rows import inbound_row

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

LIST = "/admin/inbound/inboundmessage/"
UNROUTED = "/admin/inbound/unroutedinbound/"
OTHER_NUMBER = "+12025550143"


def staff(role: str | None) -> Client:
    roles_sync(apps)
    user = User.objects.create_user(f"u-{role}", "u@example.com", "pw-for-tests-only-1", is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def test_list_masks_the_contact_previews_the_body_and_filters(tenant):
    stop = inbound_row(tenant, body="STOP", keyword="STOP", action=KeywordAction.OPT_OUT)
    near = inbound_row(tenant, body="stop please, I have moved house and this is not my number any more")
    InboundMessage.objects.filter(pk=near.pk).update(needs_review=True, keyword="STOP")
    lost = inbound_row(None, state=InboundState.UNROUTED, from_number=OTHER_NUMBER, provider="twilio")
    viewer = staff("viewer")
    page = viewer.get(LIST).content.decode()
    assert all(row.public_id in page for row in (stop, near, lost))
    assert "+1415*****23" in page and RECIPIENT not in page and OTHER_NUMBER not in page
    assert "stop please, I have moved house and thi…" in page and "any more" not in page

    def shown(**query):
        text = viewer.get(LIST, query).content.decode()
        return {row.public_id for row in (stop, near, lost) if row.public_id in text}

    assert shown(state="unrouted") == {lost.public_id}
    assert shown(needs_review__exact="1") == {near.public_id}
    assert shown(provider="twilio") == {lost.public_id}
    assert shown(action="opt_out") == {stop.public_id}
    assert shown(q=near.public_id) == {near.public_id}
    assert shown(q=lost.provider_message_id) == {lost.public_id}
    assert shown(q="(202) 555-0143") == {lost.public_id}  # a number in any common writing


def test_read_only_for_everyone(tenant):
    row = inbound_row(tenant)
    admin_user = User.objects.create_superuser("root", "r@example.com", "pw-for-tests-only-1")
    root = Client()
    root.force_login(admin_user)
    page = root.get(f"{LIST}{row.pk}/change/").content.decode()
    assert "Yes, see you Tuesday" in page and RECIPIENT in page  # the whole of it on its own page
    assert 'name="_save"' not in page and "<textarea" not in page
    assert root.post(f"{LIST}{row.pk}/change/", {"body": "edited"}).status_code == 405
    assert root.get(f"{LIST}add/").status_code == 403
    assert root.post(f"{LIST}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert InboundMessage.objects.get(pk=row.pk).body == "Yes, see you Tuesday"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_sees_inbound_and_the_unrouted(tenant, role):
    routed = inbound_row(tenant)
    lost = inbound_row(None, state=InboundState.UNROUTED, to_number="+14155550999")
    client = staff(role)
    assert client.get(LIST).status_code == 200
    assert client.get(f"{LIST}{routed.pk}/change/").status_code == 200
    page = client.get(UNROUTED).content.decode()
    assert lost.public_id in page and routed.public_id not in page and "+14155550999" in page
    assert client.get(f"{LIST}{routed.pk}/conversation/").status_code == 200
    assert "Unrouted inbound messages" in client.get("/admin/").content.decode()


def test_staff_without_a_role_sees_nothing(tenant):
    row = inbound_row(tenant)
    client = staff(None)
    for url in (LIST, UNROUTED, f"{LIST}{row.pk}/change/", f"{LIST}{row.pk}/conversation/"):
        assert client.get(url).status_code == 403, url


def _sent(tenant, body: str, minutes_ago: float, to: str = RECIPIENT) -> Message:
    msg = message(tenant, status=Status.DELIVERED, body=body, to=to)
    Message.objects.filter(pk=msg.pk).update(sent_at=timezone.now() - timedelta(minutes=minutes_ago))
    return msg


def test_conversation_of_a_number_pair_in_time_order_from_either_side(tenant):
    asked = _sent(tenant, "Your appointment is Tuesday 10:00. Reply C to cancel", 30)
    reply = inbound_row(tenant, body="C", days_ago=20 / 1440)
    thanks = _sent(tenant, "Cancelled. Thank you", 10)
    # Not this pair: another contact, another tenant's, and one on another of our numbers.
    _sent(tenant, "to someone else", 5, to=OTHER_NUMBER)
    other, _ = tenant_with_key("other", default_from="+14155550177")
    _sent(other, "other tenant", 5)
    inbound_row(tenant, body="to our other number", to_number="+14155550177")
    viewer = staff("viewer")

    from_inbound = viewer.get(f"{LIST}{reply.pk}/conversation/").content.decode()
    from_message = viewer.get(
        f"/admin/inbound/inboundmessage/conversation/message/{asked.pk}/"
    ).content.decode()
    for page in (from_inbound, from_message):
        order = [page.index(x) for x in (asked.public_id, reply.public_id, thanks.public_id)]
        assert order == sorted(order), "oldest first"
        assert "Reply C to cancel" in page and "Cancelled. Thank you" in page
        assert "someone else" not in page and "other tenant" not in page and "our other number" not in page
        assert "+1415*****23" in page and SENDER in page and RECIPIENT not in page.replace(SENDER, "")
    assert f"{LIST}{reply.pk}/conversation/" in viewer.get(f"{LIST}{reply.pk}/change/").content.decode()
    message_page = viewer.get(f"/admin/scheduling/message/{asked.pk}/change/").content.decode()
    assert f"/admin/inbound/inboundmessage/conversation/message/{asked.pk}/" in message_page


def test_conversation_pages_back_in_bounded_pages(tenant, monkeypatch):
    monkeypatch.setattr(inbound_admin, "CONVERSATION_PAGE_SIZE", 3)
    rows = [inbound_row(tenant, body=f"reply {i}", days_ago=(10 - i) / 1440) for i in range(5)]
    sent = _sent(tenant, "question", 30)
    viewer = staff("viewer")
    url = f"{LIST}{rows[0].pk}/conversation/"
    newest = viewer.get(url).content.decode()
    assert [r.public_id in newest for r in rows] == [False, False, True, True, True]
    assert 'id="older" href="?page=1"' in newest and 'id="newer"' not in newest
    older = viewer.get(url, {"page": "1"}).content.decode()
    assert sent.public_id in older and rows[0].public_id in older and rows[1].public_id in older
    assert 'id="older"' not in older and 'id="newer" href="?page=0"' in older
    assert viewer.get(url, {"page": "x"}).status_code == 200
