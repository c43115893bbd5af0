"""The Twilio-compatible API checks the key's scopes per operation (scheduling.facade.api), through the
official SDK: a read-only key reads, and cannot create, cancel, redact or delete (403, code 20403, naming
the scope), and a refused request changes nothing."""

from __future__ import annotations

import pytest
from twilio.base.exceptions import TwilioRestException

from scheduling.facade.resources import message_sid
from scheduling.models import Message, MessageEvent, Status
from smsgw.models import api_key_create
from smsgw.tenancy.auth import api_key_sid
from tests.factories import RECIPIENT, message, tenant_with_key
from tests.scheduling.facade.sdk_client import sdk_in_process

pytestmark = pytest.mark.django_db


@pytest.fixture
def reader():
    tenant, _ = tenant_with_key("acme")
    key, raw = api_key_create(tenant=tenant, name="reports", scopes=["messages:read"])
    return tenant, key, raw


def _refused(call, scope: str) -> None:
    with pytest.raises(TwilioRestException) as err:
        call()
    assert err.value.status == 403 and err.value.code == 20403 and repr(scope) in err.value.msg


def test_a_read_only_key_reads_and_cannot_create_update_or_delete(reader):
    tenant, _key, raw = reader
    scheduled = message(tenant, due_in=3600)
    sid = message_sid(scheduled.public_id)
    client = sdk_in_process(tenant.facade_account_sid, raw)
    assert [m.sid for m in client.messages.list()] == [sid]
    assert client.messages(sid).fetch().body == "hello"
    events = MessageEvent.objects.count()

    _refused(lambda: client.messages.create(to=RECIPIENT, from_="+14155550100", body="hi"), "messages:send")
    _refused(lambda: client.messages(sid).update(status="canceled"), "messages:cancel")
    _refused(lambda: client.messages(sid).update(body=""), "messages:delete")
    _refused(lambda: client.messages(sid).delete(), "messages:delete")

    assert list(Message.objects.values_list("public_id", "status", "body")) == [
        (scheduled.public_id, Status.SCHEDULED, "hello")
    ]
    assert MessageEvent.objects.count() == events


def test_the_key_sid_form_of_credentials_carries_the_same_scopes(reader):
    tenant, key, raw = reader
    client = sdk_in_process(api_key_sid(key), raw.split("_")[2], account_sid=tenant.facade_account_sid)
    assert client.messages.list() == []
    _refused(lambda: client.messages.create(to=RECIPIENT, from_="+14155550100", body="hi"), "messages:send")
    assert not Message.objects.exists()


def test_a_scope_check_comes_before_the_message_lookup(reader):
    """A key without messages:delete cannot tell which SIDs exist by deleting."""
    tenant, _key, raw = reader
    client = sdk_in_process(tenant.facade_account_sid, raw)
    _refused(lambda: client.messages("SM" + "0" * 32).delete(), "messages:delete")
