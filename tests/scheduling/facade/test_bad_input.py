"""The Twilio-compatible API under fuzzed parameters (docs/coming-from-twilio.md, "Errors"): Unicode
digits, huge and non-UTF-8 values, repeated keys, dates past datetime's range, forged paging. Every case is
Twilio's error body ({code, message, more_info, status}) with a 4xx, never a 500 or an HTML page, and
nothing is stored."""

from __future__ import annotations

import base64
import json

import pytest
from django.test import Client

from scheduling.models import Message
from tests.factories import RECIPIENT, SENDER, tenant_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def facade(db):
    tenant, key = tenant_with_key("acme", allowed_countries=["US", "GB"])
    auth = "Basic " + base64.b64encode(f"{tenant.facade_account_sid}:{key}".encode()).decode()
    client = Client(HTTP_AUTHORIZATION=auth, raise_request_exception=False)
    client.url = f"/2010-04-01/Accounts/{tenant.facade_account_sid}/Messages.json"  # type: ignore[attr-defined]
    # One message already accepted, so that a list has something to page over and "nothing stored" has
    # something to compare with.
    created = client.post(client.url, {"To": RECIPIENT, "From": SENDER, "Body": "accepted"})
    assert created.status_code == 201, created.content
    return client


def assert_twilio_error(resp, status: int, code: int | None = None, names: str | None = None) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.content[:300])
    assert resp["Content-Type"].startswith("application/json"), resp.content[:300]
    body = json.loads(resp.content)
    assert set(body) == {"code", "message", "more_info", "status"}, body
    assert body["status"] == status and isinstance(body["code"], int)
    assert body["more_info"] == f"https://www.twilio.com/docs/errors/{body['code']}"
    assert b"Traceback" not in resp.content and b"<html" not in resp.content.lower()
    if code is not None:
        assert body["code"] == code, body
    if names is not None:
        assert names in body["message"], body
    return body


def stored() -> list:
    return sorted(Message.objects.values_list("public_id", "to", "body", "expires_at", "status", "version"))


UNICODE_DIGITS = {
    "superscript": "\u00b2",  # str.isdigit() accepts it, int() raises: the 500 before
    "arabic-indic": "\u0661\u0662\u0660",  # int() reads 120: accepted before
    "full-width": "\uff11\uff12\uff10",
    "underscore": "1_20",
    "space": " 120",
    "5000-digits": "9" * 5000,  # int() refuses past 4,300 digits: a 500 before
}


@pytest.mark.parametrize("value", UNICODE_DIGITS.values(), ids=UNICODE_DIGITS.keys())
def test_a_validity_period_not_in_ascii_digits_is_21623(facade, value):
    before = stored()
    resp = facade.post(facade.url, {"To": RECIPIENT, "From": SENDER, "Body": "hi", "ValidityPeriod": value})
    assert_twilio_error(resp, 400, 21623, "ValidityPeriod")
    assert stored() == before


@pytest.mark.parametrize("value", UNICODE_DIGITS.values(), ids=UNICODE_DIGITS.keys())
@pytest.mark.parametrize("param", ["PageSize", "Page"])
def test_a_page_or_page_size_not_in_ascii_digits_is_a_400_naming_it(facade, param, value):
    assert_twilio_error(facade.get(facade.url, {param: value}), 400, 20001, param)


@pytest.mark.parametrize(
    "token",
    [
        "PA\u00b2",
        "PA\u0661",
        "PA\uff11",
        "PA" + "9" * 19,  # past a 64-bit id
        "PA" + "9" * 5000,
        "PA",
        "PB12",
        "PA-1",
    ],
    ids=[
        "superscript",
        "arabic-indic",
        "full-width",
        "int64-overflow",
        "5000-digits",
        "empty",
        "PB",
        "negative",
    ],
)
def test_a_forged_page_token_is_a_400_naming_it(facade, token):
    assert_twilio_error(facade.get(facade.url, {"PageToken": token}), 400, 20001, "PageToken")


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("DateSent<", "0001-01-01T00:00:00+01:00"),  # before year 1 in UTC: an OverflowError, a 500 before
        ("DateSent>", "0001-01-01T00:30:00+01:00"),
        ("DateSent", "2026-01-0\u0661"),
        ("DateSent", "\uff12\uff10\uff12\uff16-01-01"),
        ("DateSent", "9" * 5000),
        ("DateSent", "2026-13-01"),
    ],
)
def test_a_date_sent_filter_past_datetimes_range_or_not_a_date_is_a_400_naming_it(facade, param, value):
    body = assert_twilio_error(facade.get(facade.url, {param: value}), 400, 20001, param)
    assert len(body["message"]) < 200  # the value is not echoed whole


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("DateSent", "9999-12-31"),  # its end was computed as the next day: an OverflowError, a 500 before
        ("DateSent>", "9999-12-31T23:59:59Z"),
        ("DateSent<", "0001-01-01T00:00:00Z"),
    ],
)
def test_a_date_sent_at_the_edge_of_the_range_is_an_empty_page(facade, param, value):
    resp = facade.get(facade.url, {param: value})
    assert resp.status_code == 200, resp.content[:300]
    assert resp.json()["messages"] == []


@pytest.mark.parametrize(
    "query",
    ["To=%FF", "From=%C3%28", "DateSent=%FF%FE", "%FF=1"],
    ids=["To", "From", "DateSent", "name"],
)
def test_a_list_parameter_that_is_not_utf8_is_a_400_naming_it(facade, query):
    resp = facade.get(f"{facade.url}?{query}")
    assert_twilio_error(resp, 400, 20001, "not valid UTF-8")


@pytest.mark.parametrize(
    "body",
    [
        b"To=%2B14155550124&From=%2B14155550100&Body=%FF%FE",  # percent-encoded, not UTF-8
        b"To=%2B14155550124&From=%2B14155550100&Body=\xff\xfe",  # raw bytes, not UTF-8
    ],
    ids=["percent-encoded", "raw"],
)
def test_a_create_parameter_that_is_not_utf8_is_a_400_naming_it(facade, body):
    before = stored()
    resp = facade.post(facade.url, body, content_type="application/x-www-form-urlencoded")
    assert_twilio_error(resp, 400, 20001, "'Body' is not valid UTF-8")
    assert stored() == before


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("post", "To=%2B14155550124&To=%2B14155550125&From=%2B14155550100&Body=hi"),
        ("post", "To=%2B14155550124&From=%2B14155550100&Body=a&Body=b"),
        ("get", "To=%2B14155550124&To=%2B14155550125"),
    ],
    ids=["create-To", "create-Body", "list-To"],
)
def test_a_parameter_given_twice_is_a_400_naming_it(facade, method, body):
    before = stored()
    if method == "post":
        resp = facade.post(facade.url, body, content_type="application/x-www-form-urlencoded")
    else:
        resp = facade.get(f"{facade.url}?{body}")
    assert_twilio_error(resp, 400, 20001, "given more than once")
    assert stored() == before


@pytest.mark.parametrize(
    ("param", "value", "code"),
    [
        ("To", "+" + "1" * 100_000, 21211),
        ("Body", "x" * 100_000, 21617),
        ("StatusCallback", "https://" + "a" * 100_000, 21609),
        ("SendAt", "9" * 100_000, 35115),
        ("SmsgwTimezone", "A" * 100_000, 35115),
        ("ValidityPeriod", "9" * 100_000, 21623),
    ],
)
def test_a_huge_parameter_is_a_400_that_does_not_echo_it(facade, param, value, code):
    before = stored()
    params = {"To": RECIPIENT, "From": SENDER, "Body": "hi", param: value}
    body = assert_twilio_error(facade.post(facade.url, params), 400, code)
    assert len(body["message"]) < 1000
    assert stored() == before


def test_a_body_over_the_api_limit_is_a_twilio_413_before_authentication(facade, settings):
    before = stored()
    big = {"To": RECIPIENT, "From": SENDER, "Body": "x" * (settings.API_MAX_BODY_BYTES + 1)}
    assert_twilio_error(facade.post(facade.url, big), 413, 20001)
    # Unauthenticated too: the size is checked first (the body is drained, then refused).
    anonymous = Client(raise_request_exception=False)
    assert_twilio_error(anonymous.post(facade.url, big), 413, 20001)
    assert stored() == before


@pytest.mark.parametrize(
    "path",
    ["/2010-04-01/Accounts/{sid}/Calls.json", "/2010-04-01/Nothing", "/2010-04-01/Accounts/{sid}/Messages"],
)
def test_an_unknown_path_under_the_twilio_api_is_a_twilio_404(facade, path):
    sid = facade.url.split("/")[3]
    assert_twilio_error(facade.get(path.format(sid=sid)), 404, 20404)


@pytest.mark.parametrize(
    "body",
    ["Status=canceled&Status=canceled", "Body=&Body=", "Status=%FF"],
    ids=["Status-twice", "Body-twice", "Status-not-utf8"],
)
def test_an_update_with_a_repeated_or_non_utf8_parameter_is_a_400_and_changes_nothing(facade, body):
    sid = facade.get(facade.url).json()["messages"][0]["sid"]
    before = stored()
    resp = facade.post(
        facade.url.replace(".json", f"/{sid}.json"), body, content_type="application/x-www-form-urlencoded"
    )
    assert_twilio_error(resp, 400, 20001)
    assert stored() == before
