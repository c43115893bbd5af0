"""The Twilio-compatible IncomingPhoneNumbers resource (scheduling.facade.numbers) through the official
Twilio Python SDK: a program lists and fetches its numbers and sets a number's SmsUrl and SmsMethod as on
Twilio (twilio.com/docs/phone-numbers/api/incomingphonenumber-resource); bad input is a 400 naming the
parameter; another tenant's number is a 404."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client as DjangoClient
from twilio.base.exceptions import TwilioRestException

from scheduling.facade.resources import number_sid, sender_pk_of
from smsgw.models import TenantSender
from tests.factories import SENDER, sender_for, tenant_with_key
from tests.scheduling.facade.sdk_client import sdk_in_process

pytestmark = pytest.mark.django_db
URL = "https://127.0.0.1:9/sms"  # never called here


@pytest.fixture
def account(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    return tenant_with_key("acme", allowed_countries=["US", "GB"])


@pytest.fixture
def client(account):
    tenant, key = account
    return sdk_in_process(tenant.facade_account_sid, key)


def _basic(tenant, key) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{tenant.facade_account_sid}:{key}".encode()).decode()


def test_the_sdk_lists_fetches_and_points_the_tenants_numbers(account, client):
    tenant, _ = account
    numbers = client.incoming_phone_numbers.list()
    assert [n.phone_number for n in numbers] == [SENDER]  # the pool is not a phone number
    number = numbers[0]
    assert number.sid == number_sid(TenantSender.objects.get(tenant=tenant, value=SENDER).pk)
    assert number.sid.startswith("PN") and len(number.sid) == 34
    assert number.account_sid == tenant.facade_account_sid and number.sms_url == ""
    assert number.capabilities == {"fax": False, "mms": False, "sms": True, "voice": False}

    updated = client.incoming_phone_numbers(number.sid).update(sms_url=URL, sms_method="GET")
    assert (updated.sms_url, updated.sms_method) == (URL, "GET")
    fetched = client.incoming_phone_numbers(number.sid).fetch()
    assert (fetched.sid, fetched.sms_url, fetched.sms_method) == (number.sid, URL, "GET")
    row = TenantSender.objects.get(tenant=tenant, value=SENDER)
    assert (row.sms_url, row.sms_method) == (URL, "GET")
    cleared = client.incoming_phone_numbers(number.sid).update(sms_url="")
    assert cleared.sms_url == "" and cleared.sms_method == "GET"


def test_the_list_pages_and_filters_as_twilios(account, client):
    tenant, _ = account
    for n in range(5):
        sender_for(tenant, f"+1415555020{n}")
    assert len(client.incoming_phone_numbers.list(page_size=2)) == 6
    first = client.incoming_phone_numbers.page(page_size=4)
    assert [len(list(p)) for p in (first, first.next_page())] == [4, 2]
    assert [n.phone_number for n in client.incoming_phone_numbers.list(phone_number="5550203")] == [
        "+14155550203"
    ]


def test_bad_sms_urls_and_parameters_are_refused_naming_them(account, client, settings):
    (number,) = client.incoming_phone_numbers.list()
    settings.WEBHOOK_ALLOW_PRIVATE = False
    for url in (
        "http://127.0.0.1:9/sms",
        "https://127.0.0.1:9/sms",
        "ftp://example.com/x",
        "https://u:p@x.io/",
    ):
        with pytest.raises(TwilioRestException) as err:
            client.incoming_phone_numbers(number.sid).update(sms_url=url)
        assert (err.value.status, err.value.code) == (400, 21502) and "SmsUrl" in err.value.msg, url
    with pytest.raises(TwilioRestException) as err:
        client.incoming_phone_numbers(number.sid).update(sms_url="https://x.io/" + "a" * 1100)
    assert err.value.code == 21502
    with pytest.raises(TwilioRestException) as err:
        client.incoming_phone_numbers(number.sid).update(sms_method="PUT")
    assert err.value.status == 400 and "SmsMethod" in err.value.msg
    with pytest.raises(TwilioRestException) as err:
        client.incoming_phone_numbers(number.sid).update(voice_url="https://example.com/v")
    assert err.value.status == 400 and "VoiceUrl" in err.value.msg
    assert client.incoming_phone_numbers(number.sid).fetch().sms_url == ""


def test_hostile_requests_are_4xx_and_change_nothing(account):
    tenant, key = account
    sid = number_sid(TenantSender.objects.get(tenant=tenant, value=SENDER).pk)
    base = f"/2010-04-01/Accounts/{tenant.facade_account_sid}/IncomingPhoneNumbers"
    http = DjangoClient(HTTP_AUTHORIZATION=_basic(tenant, key))
    form = "application/x-www-form-urlencoded"
    answers = [
        http.post(f"{base}/{sid}.json", "SmsUrl=https%3A%2F%2Fx.io%2F%00", content_type=form),
        http.post(f"{base}/{sid}.json", "SmsUrl=https://x.io/a\x01b", content_type=form),
        http.post(f"{base}/{sid}.json", urlencode([("SmsUrl", URL), ("SmsUrl", URL)]), content_type=form),
        http.post(f"{base}/{sid}.json", b"SmsUrl=%ff", content_type=form),
        http.get(f"{base}/PN{'z' * 32}.json"),
        http.get(f"{base}/{sid[:-1]}0.json" if not sid.endswith("0") else f"{base}/{sid[:-1]}1.json"),
        http.get(f"{base}.json?PageSize=0"),
        http.get(f"{base}.json?PageToken=PAx"),
        http.get(f"{base}.json?Bogus=1"),
        http.post(f"{base}.json", urlencode({"PhoneNumber": "+14155550999"}), content_type=form),
        http.delete(f"{base}/{sid}.json"),
    ]
    assert [a.status_code for a in answers] == [400, 400, 400, 400, 404, 404, 400, 400, 400, 405, 405]
    assert all(set(a.json()) == {"code", "message", "more_info", "status"} for a in answers)
    assert TenantSender.objects.get(tenant=tenant, value=SENDER).sms_url == ""


def test_another_tenants_number_is_not_found(account, client):
    other, _ = tenant_with_key("other", default_from="+14155550177")
    their = TenantSender.objects.get(tenant=other, value="+14155550177")
    assert sender_pk_of(number_sid(their.pk)) == their.pk
    for call in (lambda n: n.fetch(), lambda n: n.update(sms_url=URL)):
        with pytest.raises(TwilioRestException) as err:
            call(client.incoming_phone_numbers(number_sid(their.pk)))
        assert err.value.status == 404
    assert TenantSender.objects.get(pk=their.pk).sms_url == ""
