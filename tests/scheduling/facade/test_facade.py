"""The Twilio-compatible Messages API through the official Twilio Python SDK (answered in-process by
Django's test client; tests/integration/test_twilio_sdk.py does the same over a live gunicorn): Twilio's
shapes, paging, cancel, redaction, delete, errors, strict mode, and the signed status callbacks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl
from zoneinfo import ZoneInfo

import pytest
from django.test import Client as DjangoClient
from django.utils import timezone
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.request_validator import RequestValidator

from delivery.models import Attempt
from receipts.models import WebhookDelivery
from receipts.webhooks import STATUS_CALLBACK, webhooks_deliver_due
from scheduling.facade.resources import message_sid, public_id_of
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.models import ApiKey
from smsgw.tenancy.auth import api_key_sid
from tests.factories import RECIPIENT, messages_bulk, sender_for, tenant_with_key
from tests.scheduling.facade.sdk_client import sdk_in_process
from tests.webhook_receiver import WebhookReceiver

SERVICE = "MG" + "a" * 32


@pytest.fixture
def account(db):
    tenant, key = tenant_with_key("acme", allowed_countries=["US", "GB"])
    sender_for(tenant, SERVICE)  # the Messaging Service the scheduled sends name is the tenant's
    return tenant, key


@pytest.fixture
def client(account):
    tenant, key = account
    return sdk_in_process(tenant.facade_account_sid, key)


def _move(msg: Message, *steps: str) -> None:
    current = msg.status
    for status in steps:
        transitions.transition(msg.pk, from_statuses=[current], to_status=status, kind=f"to_{status}")
        current = status


def _v1(key: str) -> DjangoClient:
    return DjangoClient(HTTP_AUTHORIZATION=f"Bearer {key}")


def test_create_now_answers_twilios_resource_and_is_the_same_message_on_v1(account, client):
    tenant, key = account
    m = client.messages.create(to=RECIPIENT, from_="+14155550100", body="hello")
    assert m.sid.startswith("SM") and len(m.sid) == 34 and m.account_sid == tenant.facade_account_sid
    assert m.status == "queued" and m.direction == "outbound-api" and m.num_segments == "1"
    assert m.to == RECIPIENT and m.from_ == "+14155550100" and m.body == "hello" and m.price is None
    assert m.error_code is None and m.date_sent is None
    assert abs((m.date_created - timezone.now()).total_seconds()) < 60  # parsed from RFC 2822 by the SDK
    stored = Message.objects.get()
    assert public_id_of(m.sid) == stored.public_id and message_sid(stored.public_id) == m.sid
    assert stored.status == Status.SCHEDULED and stored.requested_send_at == ""
    # /v1/ shows the same message, by its id or its SID, with the same timeline
    by_id = _v1(key).get(f"/v1/messages/{stored.public_id}").json()
    by_sid = _v1(key).get(f"/v1/messages/{m.sid}").json()
    assert by_id == by_sid and by_id["to"] == RECIPIENT and by_id["body"] == "hello"
    events = _v1(key).get(f"/v1/messages/{m.sid}/events").json()["events"]
    assert [e["kind"] for e in events] == ["created"]
    assert events[0]["actor"] == f"apikey:{ApiKey.objects.get().prefix}"


def test_fetch_shows_twilios_status_names_and_the_richer_one(client):
    m = client.messages.create(to=RECIPIENT, from_="+14155550100", body="hi")
    stored = Message.objects.get()
    _move(stored, Status.QUEUED, Status.SENDING)
    got = client.messages(m.sid).fetch()
    assert got.status == "sending"
    _move(Message.objects.get(), Status.SENT, Status.UNDELIVERED)
    Message.objects.update(error_code="30003", sent_at=timezone.now())
    raw = client.http_client.request("GET", f"https://api.twilio.com{got.uri}", auth=client.auth)
    import json

    payload = json.loads(raw.text)
    assert payload["status"] == "undelivered" and payload["error_code"] == 30003
    assert payload["smsgw_status"] == "undelivered" and payload["smsgw_id"] == stored.public_id
    assert parsedate_to_datetime(payload["date_sent"]).tzinfo is not None
    assert payload["error_message"] == "Unreachable destination handset"


def test_scheduled_in_utc_and_at_a_local_time(client):
    at = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    m = client.messages.create(
        to=RECIPIENT, messaging_service_sid=SERVICE, body="later", send_at=at, schedule_type="fixed"
    )
    assert m.status == "scheduled" and m.from_ is None and m.messaging_service_sid == SERVICE
    assert Message.objects.get(public_id=public_id_of(m.sid)).due_at == at
    # a local wall time: RFC 9557's zone suffix, passed through the SDK unchanged
    local = client.messages.create(
        to=RECIPIENT,
        from_="+14155550100",
        body="9 am in London",
        send_at="2027-03-10T09:00:00[Europe/London]",
    )
    stored = Message.objects.get(public_id=public_id_of(local.sid))
    assert local.status == "scheduled"
    assert stored.due_at == datetime(2027, 3, 10, 9, 0, tzinfo=ZoneInfo("Europe/London"))
    assert stored.requested_timezone == "Europe/London"


def test_extension_parameter_and_header_for_the_zone(account):
    tenant, key = account
    c = DjangoClient()
    import base64

    auth = "Basic " + base64.b64encode(f"{tenant.facade_account_sid}:{key}".encode()).decode()
    url = f"/2010-04-01/Accounts/{tenant.facade_account_sid}/Messages.json"
    resp = c.post(
        url,
        {
            "To": RECIPIENT,
            "From": "+14155550100",
            "Body": "x",
            "SendAt": "2027-07-01T08:30:00",
            "SmsgwTimezone": "America/New_York",
        },
        HTTP_AUTHORIZATION=auth,
    )
    assert resp.status_code == 201, resp.content
    stored = Message.objects.get(public_id=resp.json()["smsgw_id"])
    assert stored.due_at == datetime(2027, 7, 1, 8, 30, tzinfo=ZoneInfo("America/New_York"))
    resp = c.post(
        url,
        {"To": RECIPIENT, "From": "+14155550100", "Body": "x", "SendAt": "2027-07-01T08:30:00"},
        HTTP_AUTHORIZATION=auth,
        HTTP_X_SMSGW_TIMEZONE="Asia/Tokyo",
    )
    stored = Message.objects.get(public_id=resp.json()["smsgw_id"])
    assert stored.due_at == datetime(2027, 7, 1, 8, 30, tzinfo=ZoneInfo("Asia/Tokyo"))
    # beyond Twilio: 100 days ahead, without a messaging service or ScheduleType
    far = (timezone.now() + timedelta(days=100)).strftime("%Y-%m-%dT%H:%M:%SZ")
    resp = c.post(
        url, {"To": RECIPIENT, "From": "+14155550100", "Body": "x", "SendAt": far}, HTTP_AUTHORIZATION=auth
    )
    assert resp.status_code == 201 and resp.json()["status"] == "scheduled"
    # a typo is refused, not sent now
    before = Message.objects.count()
    resp = c.post(url, {"To": RECIPIENT, "Body": "x", "SendAT": far}, HTTP_AUTHORIZATION=auth)
    assert resp.status_code == 400 and resp.json()["code"] == 20001 and "SendAT" in resp.json()["message"]
    assert Message.objects.count() == before


def test_list_pages_as_the_sdk_follows_them(account, client):
    tenant, _ = account
    messages_bulk(tenant, 230, due_at=timezone.now())
    client.messages.create(to="+14155550199", from_="+14155550100", body="other")
    everything = client.messages.list(page_size=100)
    assert len(everything) == 231
    ids = [public_id_of(m.sid) for m in everything]
    assert ids == list(Message.objects.order_by("-id").values_list("public_id", flat=True))
    page = client.messages.page(page_size=100)
    assert page.next_page_url and "PageToken=PA" in page.next_page_url
    assert [m.to for m in client.messages.list(to="+14155550199")] == ["+14155550199"]
    assert len(client.messages.list(limit=7)) == 7
    with pytest.raises(TwilioException) as err:  # a list's refusal: the SDK raises the page's answer
        client.messages.list(page_size=1001)
    assert '"code": 20001' in str(err.value) and "HTTP 400" in str(err.value)


def test_list_by_date_sent(account, client):
    tenant, _ = account
    messages_bulk(tenant, 3, due_at=timezone.now())
    old, new, _unsent = Message.objects.order_by("id")
    now = timezone.now()
    Message.objects.filter(pk=old.pk).update(status=Status.SENT, sent_at=now - timedelta(days=3))
    Message.objects.filter(pk=new.pk).update(status=Status.SENT, sent_at=now)
    got = client.messages.list(date_sent_after=now - timedelta(days=1))
    assert [public_id_of(m.sid) for m in got] == [new.public_id]
    got = client.messages.list(date_sent_before=now - timedelta(days=1))
    assert [public_id_of(m.sid) for m in got] == [old.public_id]


def test_cancel_before_and_after_the_cut_off(client):
    at = timezone.now() + timedelta(hours=2)
    m = client.messages.create(
        to=RECIPIENT, messaging_service_sid=SERVICE, body="x", send_at=at, schedule_type="fixed"
    )
    canceled = client.messages(m.sid).update(status="canceled")
    assert canceled.status == "canceled"
    assert Message.objects.get().status == Status.CANCELLED
    late = client.messages.create(to=RECIPIENT, from_="+14155550100", body="y")
    _move(Message.objects.get(public_id=public_id_of(late.sid)), Status.QUEUED, Status.SENDING, Status.SENT)
    with pytest.raises(TwilioRestException) as err:
        client.messages(late.sid).update(status="canceled")
    assert err.value.status == 409 and err.value.code == 30409
    assert Message.objects.get(public_id=public_id_of(late.sid)).status == Status.SENT


def test_redact_and_delete_where_twilio_allows(client):
    m = client.messages.create(to=RECIPIENT, from_="+14155550100", body="secret code 1234")
    with pytest.raises(TwilioRestException) as err:
        client.messages(m.sid).update(body="")
    assert err.value.code == 20009
    with pytest.raises(TwilioRestException) as err:
        client.messages(m.sid).delete()
    assert err.value.code == 20009
    stored = Message.objects.get()
    assert stored.body == "secret code 1234"
    _move(stored, Status.QUEUED, Status.SENDING, Status.SENT, Status.DELIVERED)
    redacted = client.messages(m.sid).update(body="")
    assert redacted.body == "" and Message.objects.get().body == ""
    assert Message.objects.get().events.filter(kind="redacted").count() == 1
    assert client.messages(m.sid).delete() is True
    with pytest.raises(TwilioRestException) as err:
        client.messages(m.sid).fetch()
    assert err.value.status == 404 and err.value.code == 20404
    with pytest.raises(TwilioRestException) as err:
        client.messages(m.sid).delete()
    assert err.value.status == 404, "deleted once"
    assert client.messages.list() == []


def test_delete_keeps_a_tombstone_with_the_timeline_and_attempts_for_the_audit(account, client):
    """The tenant's view loses the message (Twilio's 404 after a delete); the gateway keeps the row with
    its content erased, its timeline and attempts, and a `deleted` entry naming the key and the time."""
    _, key = account
    m = client.messages.create(to=RECIPIENT, from_="+14155550100", body="secret code 1234")
    stored = Message.objects.get()
    _move(stored, Status.QUEUED, Status.SENDING, Status.SENT, Status.DELIVERED)
    Attempt.objects.create(
        message=stored, number=1, provider="twilio", idempotency_token="t", started_at=timezone.now()
    )
    before = timezone.now()
    assert client.messages(m.sid).delete() is True

    tomb = Message.objects.get()
    assert tomb.deleted_at is not None and tomb.deleted_at >= before
    assert tomb.status == Status.DELIVERED and tomb.body == "" and tomb.metadata == {}
    assert RECIPIENT not in tomb.to and tomb.to.endswith(RECIPIENT[-2:])
    kinds = list(tomb.events.order_by("id").values_list("kind", flat=True))
    assert kinds[0] == "created" and kinds[-1] == "deleted" and "to_delivered" in kinds
    deleted = tomb.events.get(kind="deleted")
    assert deleted.actor == f"apikey:{ApiKey.objects.get().prefix}" and deleted.created_at >= before
    assert tomb.attempts.count() == 1
    v1 = _v1(key)
    assert v1.get(f"/v1/messages/{stored.public_id}").status_code == 404
    assert v1.get(f"/v1/messages/{stored.public_id}/events").status_code == 404
    assert v1.get("/v1/messages").json()["results"] == []


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"to": "+1234", "from_": "+14155550100", "body": "x"}, 21211),
        ({"to": "not a number", "from_": "+14155550100", "body": "x"}, 21211),
        ({"to": RECIPIENT, "from_": "+14155550100"}, 21602),
        ({"to": RECIPIENT, "from_": "not!a sender", "body": "x"}, 21606),
        ({"to": RECIPIENT, "from_": "+14155550100", "body": "x", "schedule_type": "fixed"}, 35111),
        ({"to": "+33612345678", "from_": "+14155550100", "body": "x"}, 21408),
        ({"to": RECIPIENT, "from_": "+14155550100", "body": "x", "send_at": "2020-01-01T00:00:00Z"}, 35114),
        ({"to": RECIPIENT, "from_": "+14155550100", "body": "x", "validity_period": 0}, 21623),
    ],
)
def test_refusals_are_twilios_codes_and_store_nothing(client, kwargs, code):
    with pytest.raises(TwilioRestException) as err:
        client.messages.create(**kwargs)
    assert err.value.status == 400 and err.value.code == code, err.value.msg
    assert not Message.objects.exists()


def test_error_body_is_twilios_shape(account):
    tenant, key = account
    import base64

    auth = "Basic " + base64.b64encode(f"{tenant.facade_account_sid}:{key}".encode()).decode()
    resp = DjangoClient().post(
        f"/2010-04-01/Accounts/{tenant.facade_account_sid}/Messages.json",
        {"To": "+1", "Body": "x"},
        HTTP_AUTHORIZATION=auth,
    )
    assert resp.status_code == 400
    assert resp.json() == {
        "code": 21211,
        "message": "The 'To' number +1 is not a valid phone number.",
        "more_info": "https://www.twilio.com/docs/errors/21211",
        "status": 400,
    }


def test_wrong_token_other_account_and_api_key_sid(account):
    tenant, key = account
    wrong = sdk_in_process(tenant.facade_account_sid, key[:-2] + "zz")
    with pytest.raises(TwilioRestException) as err:
        wrong.messages.create(to=RECIPIENT, from_="+14155550100", body="x")
    assert err.value.status == 401 and err.value.code == 20003
    other, other_key = tenant_with_key("other")
    crossed = sdk_in_process(other.facade_account_sid, key)  # acme's key under another account's SID
    with pytest.raises(TwilioException) as err:
        crossed.messages.list()
    assert '"code": 20003' in str(err.value) and "HTTP 401" in str(err.value)
    # another tenant's message is not found, with its own valid credentials
    mine = sdk_in_process(tenant.facade_account_sid, key).messages.create(
        to=RECIPIENT, from_="+14155550100", body="x"
    )
    with pytest.raises(TwilioRestException) as err:
        sdk_in_process(other.facade_account_sid, other_key).messages(mine.sid).fetch()
    assert err.value.code == 20404
    # Twilio's API-key form: the key's SID as the username, its secret as the password
    api_key = ApiKey.objects.get(tenant=tenant)
    by_key = sdk_in_process(api_key_sid(api_key), key.split("_")[2], tenant.facade_account_sid)
    assert by_key.messages(mine.sid).fetch().sid == mine.sid
    assert Message.objects.count() == 1


def test_strict_mode_answers_twilios_limits(account, client):
    tenant, _ = account
    tenant.facade_strict = True
    tenant.save()
    soon = timezone.now() + timedelta(minutes=10)
    with pytest.raises(TwilioRestException) as err:
        client.messages.create(
            to=RECIPIENT, messaging_service_sid=SERVICE, body="x", send_at=soon, schedule_type="fixed"
        )
    assert err.value.code == 35114
    later = timezone.now() + timedelta(hours=1)
    with pytest.raises(TwilioRestException) as err:
        client.messages.create(
            to=RECIPIENT, from_="+14155550100", body="x", send_at=later, schedule_type="fixed"
        )
    assert err.value.code == 35118
    with pytest.raises(TwilioRestException) as err:
        client.messages.create(
            to=RECIPIENT,
            messaging_service_sid=SERVICE,
            body="x",
            send_at="2027-03-10T09:00:00[Europe/London]",
            schedule_type="fixed",
        )
    assert err.value.code == 35115
    assert not Message.objects.exists()
    ok = client.messages.create(
        to=RECIPIENT, messaging_service_sid=SERVICE, body="x", send_at=later, schedule_type="fixed"
    )
    assert ok.status == "scheduled"
    # strict: a message past `scheduled` cannot be canceled, even before it reaches the provider
    now = client.messages.create(to=RECIPIENT, from_="+14155550100", body="now")
    _move(Message.objects.get(public_id=public_id_of(now.sid)), Status.QUEUED)
    with pytest.raises(TwilioRestException) as err:
        client.messages(now.sid).update(status="canceled")
    assert err.value.code == 30409


def test_status_callbacks_in_twilios_order_signed_for_the_sdks_validator(account, client, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.WEBHOOK_ALLOW_HTTP = True
    tenant, _ = account
    receiver = WebhookReceiver().start()
    try:
        scheduled = client.messages.create(
            to=RECIPIENT,
            messaging_service_sid=SERVICE,
            body="x",
            send_at=timezone.now() + timedelta(hours=1),
            schedule_type="fixed",
            status_callback=receiver.url + "?m=1",
        )
        msg = Message.objects.get(public_id=public_id_of(scheduled.sid))
        _move(msg, Status.QUEUED, Status.SENDING, Status.QUEUED, Status.SENDING, Status.SENT)
        Message.objects.filter(pk=msg.pk).update(from_number="+14155550100", error_code="30003")
        _move(Message.objects.get(pk=msg.pk), Status.UNDELIVERED)
        rows = WebhookDelivery.objects.filter(event_type=STATUS_CALLBACK).order_by("id")
        assert [r.payload["params"]["MessageStatus"] for r in rows] == ["queued", "sent", "undelivered"]
        while webhooks_deliver_due():
            pass
        assert len(receiver.received) == 3
        validator = RequestValidator(tenant.callback_signing_key)
        seen = []
        for got in receiver.received:
            params = dict(parse_qsl(got["body"]))
            url = f"http://127.0.0.1:{receiver.port}{got['path']}"
            assert validator.validate(url, params, got["headers"]["x-twilio-signature"])
            seen.append(params["MessageStatus"])
            assert params["MessageSid"] == scheduled.sid and params["AccountSid"] == tenant.facade_account_sid
            assert params["To"] == RECIPIENT and params["MessagingServiceSid"] == SERVICE
        assert sorted(seen) == ["queued", "sent", "undelivered"]
        last = dict(parse_qsl(next(g["body"] for g in receiver.received if "undelivered" in g["body"])))
        assert last["ErrorCode"] == "30003" and last["From"] == "+14155550100"
        # tampered: the SDK's validator refuses it
        got = receiver.received[0]
        params = dict(parse_qsl(got["body"]))
        params["MessageStatus"] = "delivered"
        assert not validator.validate(
            f"http://127.0.0.1:{receiver.port}{got['path']}", params, got["headers"]["x-twilio-signature"]
        )
        assert not RequestValidator("another-key").validate(
            f"http://127.0.0.1:{receiver.port}{got['path']}",
            dict(parse_qsl(got["body"])),
            got["headers"]["x-twilio-signature"],
        )
        assert all(
            r.status == "delivered" for r in WebhookDelivery.objects.filter(event_type=STATUS_CALLBACK)
        )
    finally:
        receiver.stop()


def test_a_send_now_calls_back_sent_and_delivered_only(client):
    m = client.messages.create(
        to=RECIPIENT, from_="+14155550100", body="x", status_callback="https://example.com/cb"
    )
    msg = Message.objects.get(public_id=public_id_of(m.sid))
    _move(msg, Status.QUEUED, Status.SENDING, Status.SENT, Status.DELIVERED)
    rows = WebhookDelivery.objects.filter(event_type=STATUS_CALLBACK).order_by("id")
    assert [r.payload["params"]["MessageStatus"] for r in rows] == ["sent", "delivered"]
    assert all("ErrorCode" not in r.payload["params"] for r in rows)
    canceled = client.messages.create(
        to=RECIPIENT, from_="+14155550100", body="x", status_callback="https://example.com/cb2"
    )
    client.messages(canceled.sid).update(status="canceled")
    assert (
        WebhookDelivery.objects.filter(event_type=STATUS_CALLBACK).last().payload["params"]["MessageStatus"]
        == "canceled"
    )


def test_bad_status_callback_url_is_refused(client):
    with pytest.raises(TwilioRestException) as err:
        client.messages.create(
            to=RECIPIENT, from_="+14155550100", body="x", status_callback="ftp://example.com/x"
        )
    assert err.value.code == 21609
    assert not Message.objects.exists()


def test_date_is_rfc2822():
    from scheduling.facade.resources import rfc2822

    assert rfc2822(datetime(2026, 12, 2, 18, 5, 7, 123, tzinfo=UTC)) == "Wed, 02 Dec 2026 18:05:07 +0000"


def test_hostile_input_is_a_twilio_error_never_a_500(account, settings):
    tenant, key = account
    import base64

    auth = "Basic " + base64.b64encode(f"{tenant.facade_account_sid}:{key}".encode()).decode()
    url = f"/2010-04-01/Accounts/{tenant.facade_account_sid}/Messages.json"
    c = DjangoClient()
    resp = c.post(url, {"To": RECIPIENT, "From": "+14155550100", "Body": "a\x00b"}, HTTP_AUTHORIZATION=auth)
    assert resp.status_code == 400 and resp.json()["code"] == 20001 and "Body" in resp.json()["message"]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    resp = c.post(url, {"To": RECIPIENT, "From": "+14155550100", "Body": "x" * 2000}, HTTP_AUTHORIZATION=auth)
    assert resp.status_code == 413 and resp.json()["code"] == 20001
    resp = c.get(url + "?To=%00", HTTP_AUTHORIZATION=auth)
    assert resp.status_code == 400 and resp.json()["code"] == 20001
    resp = c.post(url, {"To": RECIPIENT}, HTTP_AUTHORIZATION="Basic !!!")
    assert resp.status_code == 401 and resp.json()["code"] == 20003 and resp["WWW-Authenticate"]
    resp = c.put(url, HTTP_AUTHORIZATION=auth)
    assert resp.status_code == 405 and resp.json()["status"] == 405
    resp = c.get(
        f"/2010-04-01/Accounts/{tenant.facade_account_sid}/Messages/SMnotasid.json", HTTP_AUTHORIZATION=auth
    )
    assert resp.status_code == 404 and resp.json()["code"] == 20404
    assert not Message.objects.exists()


def test_the_keys_rate_limit_is_twilios_20429(account):
    tenant, key = account
    tenant.api_rate_per_second = 1
    tenant.save()
    client = sdk_in_process(tenant.facade_account_sid, key)
    codes = []
    for _ in range(50):
        try:
            client.messages(message_sid("msg_" + "0" * 24)).fetch()
        except TwilioRestException as exc:
            codes.append(exc.code)
            if exc.status == 429:
                assert client.http_client.last_response.headers["Retry-After"].isdigit()
                break
    assert codes[-1] == 20429 and set(codes[:-1]) == {20404}
