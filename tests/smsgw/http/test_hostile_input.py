"""Hostile input (docs/api.md, "Bad input, error responses and log redaction"): whatever arrives at /v1/... or /receipts/..., the answer is the JSON
error envelope, a 4xx naming the field (never a 500, never HTML, never a traceback), and nothing already
accepted changes. Each class of input is one parametrized test over every route and field it can reach."""

from __future__ import annotations

import base64
import json
import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from receipts.models import ReceiptEvent
from scheduling.messages.api import MAX_METADATA_BYTES
from scheduling.models import Message, Schedule
from smsgw.config.providers import body_max_length
from smsgw.http.boundary import StrictJSONParser
from smsgw.models import Tenant
from tests.factories import RECIPIENT, SENDER, tenant_with_key

pytestmark = pytest.mark.django_db

_later = timezone.now() + timedelta(days=30)
SEND_AT = _later.strftime("%Y-%m-%dT%H:%M:00Z")
START = _later.strftime("%Y-%m-%dT09:00:00")
EXDATE = (_later + timedelta(days=1)).strftime("%Y-%m-%d")

# JSON text for the hostile characters: a NUL, both halves of an unpaired surrogate.
BAD_JSON = {"nul": "\\u0000", "high-surrogate": "\\ud800", "low-surrogate": "\\udfff"}
MARK = "__BAD__"


@pytest.fixture
def client(tenant_and_key):
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_and_key[1]}")
    c.tenant = tenant_and_key[0]
    return c


@pytest.fixture
def existing(client):
    """A message and a schedule already accepted, and a configured webhook: rejected requests must leave
    all three as they are."""
    msg = client.post(
        "/v1/messages",
        {"to": RECIPIENT, "body": "accepted", "send_at": SEND_AT, "metadata": {"k": "v"}},
        format="json",
    )
    assert msg.status_code == 201, msg.content
    sch = client.post(
        "/v1/schedules",
        {
            "to": RECIPIENT,
            "body": "daily",
            "rrule": "FREQ=DAILY",
            "start": START,
            "timezone": "UTC",
        },
        format="json",
    )
    assert sch.status_code == 201, sch.content
    Tenant.objects.filter(pk=client.tenant.pk).update(
        webhook_url="https://93.184.216.34/hook", webhook_secret="whsec_existing"
    )
    return {"message": msg.json()["id"], "schedule": sch.json()["id"]}


def snapshot(tenant) -> tuple:
    return (
        sorted(
            Message.objects.filter(tenant=tenant).values_list(
                "public_id", "to", "body", "metadata", "version", "status", "due_at"
            )
        ),
        sorted(
            Schedule.objects.filter(tenant=tenant).values_list(
                "public_id", "body", "metadata", "version", "status"
            )
        ),
        Tenant.objects.filter(pk=tenant.pk).values_list(
            "webhook_url", "webhook_secret", "quiet_hours_start", "quiet_hours_end"
        )[0],
    )


def assert_envelope(resp, status: int | tuple, field: str | None = None) -> dict:
    """The documented error shape, and nothing of a traceback or an HTML page."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert resp.status_code in statuses, (resp.status_code, resp.content[:300])
    assert resp["Content-Type"].startswith("application/problem+json"), resp.content[:300]
    body = json.loads(resp.content)
    error = body["error"]
    assert isinstance(error["code"], str) and error["code"]
    # The problem details around the envelope (RFC 9457, smsgw.http.problems) say the same.
    assert body["status"] == resp.status_code and body["code"] == error["code"], body
    assert body["type"].endswith(f"#{error['code']}") and body["detail"] == error["message"], body
    assert body["request_id"] == resp["Request-Id"], body
    assert isinstance(error["message"], str) and error["message"]
    assert b"Traceback" not in resp.content and b"<html" not in resp.content.lower()
    if field is not None:
        assert field in error.get("fields", {}), error
    return error


def send_json(client, method: str, path: str, text: str | bytes, content_type="application/json"):
    return client.generic(method.upper(), path, text, content_type=content_type)


def hostile(body: dict, bad: str) -> str:
    """JSON text of ``body`` where every MARK becomes the hostile escape (json.dumps would not write it)."""
    return json.dumps(body).replace(MARK, bad)


# --- a NUL or a surrogate anywhere in a JSON body ----------------------------------------------------------

MESSAGE = {"to": RECIPIENT, "body": "hi", "send_at": SEND_AT}
SCHEDULE = {
    "to": RECIPIENT,
    "body": "hi",
    "rrule": "FREQ=DAILY",
    "start": START,
    "timezone": "UTC",
}
STRING_FIELDS = {
    "to": RECIPIENT + MARK,
    "body": "hello " + MARK,
    "from": SENDER + MARK,
    "messaging_service_sid": "MG" + MARK,
    "timezone": "UTC" + MARK,
    "dst_policy": "later" + MARK,
    "priority": "bulk" + MARK,
    "recipient_timezone": "UTC" + MARK,
}
# (field named in the error, the fragment of the body that carries the hostile text)
JSON_CARRIERS = [
    ("metadata", {"metadata": {"order": "A-1" + MARK}}),
    ("metadata", {"metadata": {"order" + MARK: "A-1"}}),
    ("metadata", {"metadata": {"deep": {"list": ["ok", {"x": MARK}]}}}),
    ("quiet_hours", {"quiet_hours": {"start": "21:00" + MARK, "end": "08:00"}}),
    ("body", {MARK: "an unknown field whose name is hostile"}),
]


def body_cases():
    for method, path, base in (
        ("post", "/v1/messages", MESSAGE),
        ("patch", "/v1/messages/{message}", {}),
        ("post", "/v1/schedules", SCHEDULE),
        ("patch", "/v1/schedules/{schedule}", {}),
    ):
        fields = dict(STRING_FIELDS)
        if "schedules" in path:
            fields |= {"rrule": "FREQ=DAILY" + MARK, "start": START + MARK}
            carriers = [*JSON_CARRIERS, ("exdate", {"exdate": [EXDATE + MARK]})]
        else:
            fields |= {"send_at": SEND_AT + MARK}
            carriers = JSON_CARRIERS
        for name, value in fields.items():
            yield pytest.param(method, path, {**base, name: value}, name, id=f"{method} {path} {name}")
        for name, fragment in carriers:
            yield pytest.param(
                method, path, {**base, **fragment}, name, id=f"{method} {path} {name} {fragment}"
            )
    for method, path, body, name in (
        ("put", "/v1/quiet-hours", {"start": "21:00" + MARK, "end": "08:00"}, "start"),
        ("put", "/v1/quiet-hours", {"start": "21:00", "end": "08:00" + MARK}, "end"),
        ("put", "/v1/capacity/senders/" + SENDER, {"segments_per_second": "2" + MARK}, "segments_per_second"),
        ("put", "/v1/webhook", {"url": "https://93.184.216.34/" + MARK}, "url"),
        ("put", "/v1/webhook", {"url": "https://93.184.216.34/", "rotate_secret": MARK}, "rotate_secret"),
    ):
        yield pytest.param(method, path, body, name, id=f"{method} {path} {name}")


@pytest.mark.parametrize("bad", BAD_JSON.values(), ids=BAD_JSON.keys())
@pytest.mark.parametrize(("method", "path", "body", "field"), list(body_cases()))
def test_nul_or_surrogate_in_any_body_field_is_a_400_naming_it(
    client, existing, method, path, body, field, bad
):
    before = snapshot(client.tenant)
    resp = send_json(client, method, path.format(**existing), hostile(body, bad))
    assert_envelope(resp, 400, field)
    assert snapshot(client.tenant) == before


# --- query parameters, path ids and headers -------------------------------------------------------------

QUERY_CASES = (
    [
        ("/v1/messages", p)
        for p in (
            "to",
            "status",
            "cursor",
            "page_size",
            "created_after",
            "created_before",
            "due_after",
            "due_before",
        )
    ]
    + [("/v1/schedules", p) for p in ("to", "status", "cursor", "page_size")]
    + [("/v1/exports", p) for p in ("cursor", "page_size")]
    + [
        ("/v1/webhook-deliveries", p)
        for p in ("status", "event_type", "message", "created_after", "created_before", "cursor", "page_size")
    ]
    + [
        ("/v1/schedules/{schedule}/occurrences", "count"),
        ("/v1/schedules/{schedule}/occurrences", "after"),
        ("/v1/schedules/{schedule}/messages", "cursor"),
        ("/v1/schedules/{schedule}/messages", "page_size"),
    ]
)


@pytest.mark.parametrize(
    "value", ["%00", "%2B1415%005550123", "scheduled%00"], ids=["nul", "nul-inside", "nul-after"]
)
@pytest.mark.parametrize(("path", "param"), QUERY_CASES)
def test_nul_in_a_query_parameter_is_a_400_naming_it(client, existing, path, param, value):
    resp = client.get(f"{path.format(**existing)}?{param}={value}")
    assert_envelope(resp, 400, param)


@pytest.mark.parametrize("value", ["%ED%A0%80", "%FF", "abc%C3"], ids=["utf8-surrogate", "ff", "truncated"])
@pytest.mark.parametrize(("path", "param"), QUERY_CASES)
def test_invalid_utf8_in_a_query_parameter_is_a_400_naming_it(client, existing, path, param, value):
    # Django would decode these to U+FFFD, and a filter would silently match nothing.
    resp = client.get(f"{path.format(**existing)}?{param}={value}")
    assert_envelope(resp, 400, param)


# Every route with a path parameter, with a method it answers.
PATH_ROUTES = [
    ("get", "/v1/messages/{}", "public_id"),
    ("patch", "/v1/messages/{}", "public_id"),
    ("post", "/v1/messages/{}/cancel", "public_id"),
    ("post", "/v1/messages/{}/redact", "public_id"),
    ("get", "/v1/messages/{}/events", "public_id"),
    ("get", "/v1/schedules/{}", "public_id"),
    ("patch", "/v1/schedules/{}", "public_id"),
    ("post", "/v1/schedules/{}/pause", "public_id"),
    ("post", "/v1/schedules/{}/resume", "public_id"),
    ("post", "/v1/schedules/{}/cancel", "public_id"),
    ("get", "/v1/schedules/{}/occurrences", "public_id"),
    ("get", "/v1/schedules/{}/versions", "public_id"),
    ("get", "/v1/schedules/{}/messages", "public_id"),
    ("get", "/v1/campaigns/{}", "public_id"),
    ("get", "/v1/campaigns/{}/messages", "public_id"),
    ("get", "/v1/campaigns/{}/errors", "public_id"),
    ("post", "/v1/campaigns/{}/pause", "public_id"),
    ("post", "/v1/campaigns/{}/resume", "public_id"),
    ("post", "/v1/campaigns/{}/cancel", "public_id"),
    ("put", "/v1/capacity/senders/{}", "sender"),
    ("delete", "/v1/capacity/senders/{}", "sender"),
    ("get", "/v1/exports/{}", "public_id"),
    ("get", "/v1/exports/{}/download", "public_id"),
    ("post", "/v1/webhook-deliveries/{}/replay", "webhook_id"),
    ("post", "/receipts/{}/", "provider"),
    ("post", "/inbound/{}/", "provider"),
    ("get", "/v1/inbound/{}", "public_id"),
    ("get", "/v1/conversations/{}", "to"),
]


def _route_templates(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _route_templates(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


def test_the_path_cases_cover_every_v1_receipts_and_inbound_route_with_a_parameter():
    routes = {
        "/" + re.sub(r"<(?:\w+:)?(\w+)>", "{}", t)
        for t in _route_templates(get_resolver().url_patterns)
        if "<" in t and t.startswith(("v1/", "receipts/", "inbound/"))
    }
    assert routes == {path for _, path, _ in PATH_ROUTES}


@pytest.mark.parametrize(
    "value", ["%00", "msg_%00", "sch_1%00x", "%2B1415%00"], ids=["nul", "prefix", "mid", "sender"]
)
@pytest.mark.parametrize(("method", "path", "param"), PATH_ROUTES)
def test_nul_in_any_path_id_is_a_400_naming_it(client, existing, method, path, param, value):
    before = snapshot(client.tenant)
    resp = send_json(client, method, path.format(value), "{}")
    assert_envelope(resp, 400, param)
    assert snapshot(client.tenant) == before


@pytest.mark.parametrize(("method", "path", "param"), PATH_ROUTES)
def test_invalid_utf8_in_a_path_id_is_an_enveloped_4xx(client, existing, method, path, param):
    # Django keeps undecodable bytes percent-encoded: the id is then simply unknown (or invalid).
    resp = send_json(client, method, path.format("msg_%ED%A0%80"), "{}")
    assert_envelope(resp, (400, 403, 404))


@pytest.mark.parametrize("path", ["/v1/nope%00", "/v1/messages%00", "/receipts/twilio/%00"])
def test_nul_in_an_unknown_path_is_a_400_naming_the_path(client, path):
    assert_envelope(client.get(path), 400, "path")


@pytest.mark.parametrize(
    ("header", "value", "field"),
    [
        ("HTTP_IDEMPOTENCY_KEY", "key\x00one", "Idempotency-Key"),
        ("HTTP_AUTHORIZATION", "Bearer sk_ab\x00cd_efgh", "Authorization"),
        ("HTTP_X_REQUEST_ID", "\x00", "X-Request-Id"),
    ],
)
def test_nul_in_a_header_is_a_400_naming_it(client, existing, tenant_and_key, header, value, field):
    before = snapshot(client.tenant)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {tenant_and_key[1]}", header: value}
    resp = APIClient(raise_request_exception=False).post("/v1/messages", MESSAGE, format="json", **headers)
    assert_envelope(resp, 400, field)
    assert snapshot(client.tenant) == before


# --- shapes and sizes ----------------------------------------------------------------------------------

# Past json's recursion limit, and within SMSGW_API_MAX_OBJECT_BYTES (a deeper one is a 413 unparsed).
DEEP = {
    "array-30k": "[" * 30_000 + "]" * 30_000,
    "object-10k": '{"a":' * 10_000 + "1" + "}" * 10_000,
    "metadata-40": json.dumps({**MESSAGE, "metadata": {"a": MARK}}).replace(f'"{MARK}"', "[" * 40 + "]" * 40),
}
BODY_ROUTES = [
    ("post", "/v1/messages"),
    ("patch", "/v1/messages/{message}"),
    ("post", "/v1/schedules"),
    ("patch", "/v1/schedules/{schedule}"),
    ("put", "/v1/quiet-hours"),
    ("put", "/v1/capacity/senders/" + SENDER),
    ("put", "/v1/webhook"),
]


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_deeply_nested_json_is_a_400_naming_body(client, existing, method, path, text):
    before = snapshot(client.tenant)
    assert_envelope(send_json(client, method, path.format(**existing), text), 400, "body")
    assert snapshot(client.tenant) == before


@pytest.mark.parametrize("text", ["[]", '"x"', "1", "null", "true", '[{"to": "+14155550123"}]'])
@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_a_body_that_is_not_a_json_object_is_a_400_naming_body(client, existing, method, path, text):
    before = snapshot(client.tenant)
    resp = send_json(client, method, path.format(**existing), text)
    assert assert_envelope(resp, 400)["fields"] == {"body": ["must be a JSON object"]}
    assert snapshot(client.tenant) == before


@pytest.mark.parametrize(
    ("text", "content_type", "status"),
    [
        (b'{"to": "\xff\xfe"}', "application/json", 400),  # not UTF-8
        (b'{"to": "+1415', "application/json", 400),  # truncated
        ('{"to": NaN}', "application/json", 400),
        ('{"to": "+14155550123"}', "text/plain", 415),
        ("to=%2B14155550123&body=hi", "application/x-www-form-urlencoded", 415),
        ('{"to": 1}', "application/json; charset=latin-9000", 400),
    ],
    ids=["invalid-utf8", "truncated", "nan", "text-plain", "form", "bad-charset"],
)
@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_unreadable_bodies_and_wrong_content_types_are_enveloped_4xx(
    client, existing, method, path, text, content_type, status
):
    before = snapshot(client.tenant)
    assert_envelope(send_json(client, method, path.format(**existing), text, content_type), status)
    assert snapshot(client.tenant) == before


@pytest.mark.parametrize(
    ("fragment", "field"),
    [
        ({"validity_seconds": 10**30}, "validity_seconds"),
        ({"validity_seconds": -(10**30)}, "validity_seconds"),
        ({"validity_seconds": "1" * 5000}, "validity_seconds"),
        ({"metadata": {"n": MARK}}, "metadata"),  # 1e400: infinity
        ({"validity_seconds": MARK}, "validity_seconds"),
    ],
)
@pytest.mark.parametrize(("method", "path"), [("post", "/v1/messages"), ("post", "/v1/schedules")])
def test_out_of_range_numbers_are_a_400_naming_the_field(client, existing, method, path, fragment, field):
    base = MESSAGE if path == "/v1/messages" else SCHEDULE
    before = snapshot(client.tenant)
    text = json.dumps({**base, **fragment}).replace(f'"{MARK}"', "1e400")
    assert_envelope(send_json(client, method, path, text), 400, field)
    assert snapshot(client.tenant) == before


def test_a_huge_integer_literal_is_a_400_naming_body(client, existing):
    text = json.dumps(MESSAGE)[:-1] + ', "validity_seconds": ' + "9" * 5000 + "}"
    assert_envelope(send_json(client, "post", "/v1/messages", text), 400, "body")


TEN_MB = 10 * 1024 * 1024


@pytest.mark.parametrize(
    ("method", "path"), [*BODY_ROUTES, ("post", "/receipts/twilio/"), ("post", "/inbound/twilio/")]
)
def test_a_10_mb_body_is_a_413_in_the_envelope(client, existing, method, path):
    before = snapshot(client.tenant)
    text = json.dumps({**MESSAGE, "body": "x" * TEN_MB})
    content_type = (
        "application/x-www-form-urlencoded"
        if path.startswith(("/receipts", "/inbound"))
        else "application/json"
    )
    error = assert_envelope(
        send_json(client, method, path.format(**existing), text, content_type), 413, "body"
    )
    assert error["code"] == "request_too_large"
    assert snapshot(client.tenant) == before


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_a_single_object_body_over_its_cap_is_a_413_before_it_is_parsed(
    client, existing, settings, method, path, monkeypatch
):
    # SMSGW_API_MAX_OBJECT_BYTES, not the batch's 1 MiB: a valid single object is far smaller, and a big
    # one cost tens of ms of CPU to parse and walk before it was refused (docs/benchmarks.md).
    before = snapshot(client.tenant)
    monkeypatch.setattr(StrictJSONParser, "parse", lambda *a, **k: pytest.fail("the body was parsed"))
    many_keys = {**MESSAGE, "metadata": {f"k{i}": i for i in range(50_000)}}
    for body in ({**MESSAGE, "body": "x" * (settings.API_MAX_OBJECT_BYTES + 1)}, many_keys):
        text = json.dumps(body)
        assert settings.API_MAX_OBJECT_BYTES < len(text) < settings.API_MAX_BODY_BYTES
        error = assert_envelope(send_json(client, method, path.format(**existing), text), 413, "body")
        assert error["code"] == "request_too_large"
        assert str(settings.API_MAX_OBJECT_BYTES) in error["message"]
    assert snapshot(client.tenant) == before


def test_the_largest_valid_message_fits_the_object_cap(client, settings):
    # Every character of the body JSON-escaped (é is GSM-7: MAX_SEGMENTS segments of it, or the longest
    # body a provider takes) and metadata at its 4,096-byte limit, itself all escapes.
    chars = min(153 * settings.MAX_SEGMENTS, body_max_length() or 153 * settings.MAX_SEGMENTS)
    metadata = {"note": "é" * ((MAX_METADATA_BYTES - 20) // 6)}
    assert len(json.dumps(metadata)) <= MAX_METADATA_BYTES
    text = json.dumps({**MESSAGE, "body": "é" * chars, "metadata": metadata, "recipient_timezone": "UTC"})
    assert len(text) > 12_000
    resp = send_json(client, "post", "/v1/messages", text)
    assert resp.status_code == 201, resp.content
    assert resp.json()["segments"] == -(-chars // 153)


@pytest.mark.parametrize("value", ["abc", "-1", "1e3", " 12"])
def test_an_unreadable_content_length_is_a_400(client, value):
    resp = client.generic("POST", "/v1/messages", "{}", content_type="application/json", CONTENT_LENGTH=value)
    assert_envelope(resp, 400, "Content-Length")


# --- pagination ------------------------------------------------------------------------------------------


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


FORGED_CURSORS = {
    "text": b64("hello world"),
    "position-text": b64("p=abc"),
    "position-huge": b64("p=" + "9" * 30),
    "position-negative": b64("p=-5"),
    "position-nul": b64("p=1\x00"),
    "offset-negative": b64("o=-1&p=5"),
    "offset-huge": b64("o=99999999&p=5"),
    "reverse-2": b64("r=2&p=5"),
    "repeated": b64("p=1&p=2"),
    "unknown-token": b64("x=1&p=5"),
    "binary": b64(b"\xff\xfe\x00"),
    "not-base64": "!!!",
    "bad-padding": "cD0",
    "empty": "",
    "json": b64('{"p": 1}'),
}
LISTS = ["/v1/messages", "/v1/schedules", "/v1/schedules/{schedule}/messages", "/v1/webhook-deliveries"]


@pytest.mark.parametrize("cursor", FORGED_CURSORS.values(), ids=FORGED_CURSORS.keys())
@pytest.mark.parametrize("path", LISTS)
def test_a_forged_or_garbled_cursor_is_a_400_naming_cursor(client, existing, path, cursor):
    resp = client.get(path.format(**existing), {"cursor": cursor})
    assert_envelope(resp, 400, "cursor")


@pytest.mark.parametrize("page_size", ["-1", "0", "501", "abc", "1e3", "", " 5", "\uff15", "10.0", "9" * 40])
@pytest.mark.parametrize("path", LISTS)
def test_a_page_size_outside_1_to_500_is_a_400_naming_page_size(client, existing, path, page_size):
    resp = client.get(path.format(**existing), {"page_size": page_size})
    assert_envelope(resp, 400, "page_size")


def test_next_and_previous_links_still_walk_every_page(client):
    ids = [
        client.post("/v1/messages", {**MESSAGE, "body": f"m{i}"}, format="json").json()["id"]
        for i in range(5)
    ]
    seen, url = [], "/v1/messages?page_size=2"
    while url:
        page = client.get(url)
        assert page.status_code == 200, page.content
        seen += [m["id"] for m in page.json()["results"]]
        url = page.json()["next"]
    assert seen == ids[::-1]
    back = client.get(page.json()["previous"])
    assert back.status_code == 200 and [m["id"] for m in back.json()["results"]] == ids[::-1][2:4]
    assert client.get("/v1/messages", {"page_size": "500"}).status_code == 200


# --- Django's own error pages become the envelope on API paths -----------------------------------------


@pytest.mark.parametrize(
    "path", ["/v1/nope", "/v1/messages/x/y/z", "/v1/", "/v1", "/receipts", "/receipts/twilio/extra/"]
)
def test_unknown_api_paths_are_a_json_404(client, path):
    assert assert_envelope(client.get(path), 404)["code"] == "not_found"


def test_a_callback_with_too_many_form_fields_is_a_400_naming_body(client, settings):
    fields = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    resp = client.generic(
        "POST", "/receipts/twilio/", fields, content_type="application/x-www-form-urlencoded"
    )
    assert_envelope(resp, 400, "body")
    assert ReceiptEvent.objects.count() == 0


def test_wrong_method_on_the_receipt_endpoint_is_a_json_405_with_allow(client):
    resp = client.get("/receipts/twilio/")
    assert assert_envelope(resp, 405)["code"] == "method_not_allowed"
    assert resp["Allow"] == "POST"


def test_outside_the_api_django_pages_stay_html(client):
    resp = client.get("/admin/nope-not-here")
    assert resp.status_code in (302, 404) and not resp.get("Content-Type", "").startswith("application/json")


@pytest.fixture
def failing_urls(settings):
    settings.ROOT_URLCONF = "tests.smsgw.http.failing_urls"


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
@pytest.mark.parametrize("path", ["/v1/_test/boom", "/receipts/_test/boom/"])
def test_an_exception_in_a_view_is_a_json_500_without_a_traceback(
    client, failing_urls, settings, path, debug
):
    settings.DEBUG = debug
    resp = client.get(path)
    error = assert_envelope(resp, 500)
    assert error["code"] == "server_error"
    assert b"deliberate" not in resp.content and b"failing_urls" not in resp.content


def test_an_exception_outside_the_api_keeps_djangos_page(client, failing_urls):
    resp = client.get("/elsewhere/_test/boom")
    assert resp.status_code == 500 and not resp["Content-Type"].startswith("application/json")


# --- webhook URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://[/",
        "https://[::1",
        "https://example.com:99999/",
        "https://example.com:abc/",
        "https://example.com:-1/",
        "https://[::1" + MARK + "]/",
        "https://[fe80::1%25eth0" + MARK + "]/",
        "https://exa mple.com/",
        "https://",
        "https:///path",
        "https://" + "a" * 300 + ".com/",
    ],
)
def test_malformed_webhook_urls_are_a_400_naming_url(client, existing, url):
    before = snapshot(client.tenant)
    resp = send_json(client, "put", "/v1/webhook", hostile({"url": url}, "\\u0000"))
    assert_envelope(resp, 400, "url")
    assert snapshot(client.tenant) == before


# --- signed provider callbacks ---------------------------------------------------------------------------


@pytest.fixture
def signed(settings):
    from twilio.request_validator import RequestValidator

    from delivery.providers import get_adapter

    settings.SMSGW_PUBLIC_BASE_URL = "https://sms.example.com"
    settings.TWILIO_AUTH_TOKEN = "hostile-test-token"
    get_adapter.cache_clear()

    def post(params: dict, query: str = ""):
        url = "https://sms.example.com/receipts/twilio/" + (f"?{query}" if query else "")
        signature = RequestValidator("hostile-test-token").compute_signature(url, params)
        return Client(raise_request_exception=False).post(
            "/receipts/twilio/" + (f"?{query}" if query else ""),
            urlencode(params),
            content_type="application/x-www-form-urlencoded",  # as Twilio sends it
            HTTP_X_TWILIO_SIGNATURE=signature,
        )

    yield post
    get_adapter.cache_clear()


CALLBACK = {
    "MessageSid": "SM" + "a" * 32,
    "SmsSid": "SM" + "a" * 32,
    "MessageStatus": "delivered",
    "SmsStatus": "delivered",
    "AccountSid": "AC" + "0" * 32,
    "From": SENDER,
    "To": RECIPIENT,
    "ApiVersion": "2010-04-01",
    "ErrorCode": "",
}


@pytest.mark.parametrize("field", [*CALLBACK, "RawDlrDoneDate"])
def test_nul_in_a_correctly_signed_callback_field_is_a_400_naming_it(signed, field):
    params = {**CALLBACK, field: CALLBACK.get(field, "2612011200") + "\x00"}
    resp = signed(params)
    assert_envelope(resp, 400, field)
    assert ReceiptEvent.objects.count() == 0


def test_nul_in_a_signed_callback_query_parameter_is_a_400_naming_it(signed):
    resp = signed(CALLBACK, query="m=abc%00&a=1")
    assert_envelope(resp, 400, "m")
    assert ReceiptEvent.objects.count() == 0


def test_nul_in_the_free_text_error_message_of_a_signed_callback_is_removed_and_the_callback_stored(signed):
    # ErrorMessage is a description (the ErrorCode is what counts): refusing the callback would lose it,
    # since Twilio does not send a callback again after a 4xx.
    params = {
        **CALLBACK,
        "MessageStatus": "undelivered",
        "ErrorCode": "30003",
        "ErrorMessage": "Unreach\x00able",
    }
    resp = signed(params)
    assert resp.status_code == 201, resp.content
    stored = ReceiptEvent.objects.get()
    assert (stored.raw_status, stored.error_code) == ("undelivered", "30003")
    assert stored.payload["ErrorMessage"] == "Unreachable"


def test_nul_in_the_error_message_of_an_unsigned_callback_is_still_refused(signed, client):
    params = {**CALLBACK, "ErrorMessage": "x\x00"}
    resp = client.post(
        "/receipts/twilio/", urlencode(params), content_type="application/x-www-form-urlencoded"
    )
    assert resp.status_code == 403
    assert ReceiptEvent.objects.count() == 0


def test_a_clean_signed_callback_is_still_stored(signed):
    assert signed(CALLBACK).status_code == 201
    assert ReceiptEvent.objects.count() == 1


def test_other_tenants_are_not_reachable_through_any_of_this(client):
    other, _ = tenant_with_key("other")
    theirs = Message.objects.create(
        tenant=other,
        to=RECIPIENT,
        body="theirs",
        encoding="GSM-7",
        segments=1,
        from_number=SENDER,
        due_at=SEND_AT,
        expires_at=SEND_AT,
        run_after=SEND_AT,
    )
    assert_envelope(client.get(f"/v1/messages/{theirs.public_id}"), 404)
    assert client.get("/v1/messages").json()["results"] == []


# --- instants and counts at the edge of what Python can represent ----------------------------------------

EDGE_INSTANTS = {
    "month-13": "2026-13-45T00:00:00Z",
    "year-1-east": "0001-01-01T00:00:00+01:00",
    "year-9999-west": "9999-12-31T23:59:59-01:00",
    "offset-99h": "2026-12-01T09:00:00+99:00",
}
INSTANT_PARAMS = [
    ("/v1/messages", p) for p in ("created_after", "created_before", "due_after", "due_before")
] + [("/v1/schedules/{schedule}/occurrences", "after")]


@pytest.mark.parametrize("value", EDGE_INSTANTS.values(), ids=EDGE_INSTANTS.keys())
@pytest.mark.parametrize(("path", "param"), INSTANT_PARAMS)
def test_an_impossible_or_unrepresentable_instant_is_a_400_naming_it(client, existing, path, param, value):
    assert_envelope(client.get(path.format(**existing), {param: value}), 400, param)


@pytest.mark.parametrize("count", ["\u00b2", "\u0661\u0662", "99999999999999999999", "-1", "0", "1001"])
def test_a_preview_count_that_is_not_1_to_1000_is_a_400_naming_count(client, existing, count):
    resp = client.get(f"/v1/schedules/{existing['schedule']}/occurrences", {"count": count})
    assert_envelope(resp, 400, "count")


def test_a_schedule_start_past_year_9000_is_a_400_and_until_forever_is_accepted(client, existing):
    before = snapshot(client.tenant)
    far = client.post("/v1/schedules", {**SCHEDULE, "start": "9999-12-31T09:00:00"}, format="json")
    assert_envelope(far, 400, "start")
    assert snapshot(client.tenant) == before
    forever = client.post(
        "/v1/schedules", {**SCHEDULE, "rrule": "FREQ=DAILY;UNTIL=99991231T235959Z"}, format="json"
    )
    assert forever.status_code == 201, forever.content


# --- Unicode digits: int() reads them, str.isdigit() takes some int() refuses; the contract is ASCII ----

UNICODE_DIGITS = {
    "superscript": "\u00b2",  # isdigit() True, int() raises: a 500 where isdigit() was trusted
    "arabic-indic": "\u0661",  # int() and \d read it: accepted before
    "full-width": "\uff11",
}


@pytest.mark.parametrize("digit", UNICODE_DIGITS.values(), ids=UNICODE_DIGITS.keys())
@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=DAILY;INTERVAL={d}",
        "FREQ=DAILY;COUNT={d}",
        "FREQ=MONTHLY;BYMONTHDAY={d}",
        "FREQ=YEARLY;BYMONTH={d}",
        "FREQ=MONTHLY;BYDAY={d}MO",
        "FREQ=DAILY;UNTIL=2027{d}231T000000Z",
    ],
)
@pytest.mark.parametrize(
    ("method", "path"), [("post", "/v1/schedules"), ("patch", "/v1/schedules/{schedule}")]
)
def test_a_rule_part_in_unicode_digits_is_a_400_naming_rrule(client, existing, method, path, rule, digit):
    before = snapshot(client.tenant)
    body = (
        {**SCHEDULE, "rrule": rule.format(d=digit)} if method == "post" else {"rrule": rule.format(d=digit)}
    )
    assert_envelope(send_json(client, method, path.format(**existing), json.dumps(body)), 400, "rrule")
    assert snapshot(client.tenant) == before


@pytest.mark.parametrize("digit", UNICODE_DIGITS.values(), ids=UNICODE_DIGITS.keys())
@pytest.mark.parametrize(("path", "param"), INSTANT_PARAMS)
def test_an_instant_in_unicode_digits_is_a_400_naming_it(client, existing, path, param, digit):
    resp = client.get(path.format(**existing), {param: f"2026-12-01T0{digit}:00:00Z"})
    assert_envelope(resp, 400, param)


@pytest.mark.parametrize("digit", UNICODE_DIGITS.values(), ids=UNICODE_DIGITS.keys())
@pytest.mark.parametrize("field", ["start", "end"])
def test_a_quiet_hours_clock_in_unicode_digits_is_a_400_naming_it(client, existing, field, digit):
    before = snapshot(client.tenant)
    body = {"start": "21:00", "end": "08:00", field: f"0{digit}:00"}
    assert_envelope(send_json(client, "put", "/v1/quiet-hours", json.dumps(body)), 400, field)
    assert snapshot(client.tenant) == before


@pytest.mark.parametrize("digit", UNICODE_DIGITS.values(), ids=UNICODE_DIGITS.keys())
@pytest.mark.parametrize("path", LISTS)
def test_a_cursor_position_in_unicode_digits_is_a_400_naming_cursor(client, existing, path, digit):
    resp = client.get(path.format(**existing), {"cursor": b64(f"p=1{digit}")})
    assert_envelope(resp, 400, "cursor")


# --- long URLs: a cursor too long to be one of ours, a URL past the contract's limit ------------------------


@pytest.mark.parametrize("path", LISTS)
def test_a_5000_character_cursor_is_a_400_naming_cursor(client, existing, path):
    # Valid base64 of a well-formed position, so only its length refuses it (gunicorn's HTML 414 before).
    cursor = b64("p=" + "1" * 3700)
    assert len(cursor) > 4900
    assert_envelope(client.get(path.format(**existing), {"cursor": cursor}), 400, "cursor")


@pytest.mark.parametrize(("method", "path"), [("get", "/v1/messages"), ("post", "/v1/messages")])
def test_a_url_past_8000_bytes_is_a_414_naming_url(client, existing, method, path):
    from smsgw.http.boundary import MAX_URL_BYTES

    before = snapshot(client.tenant)
    query = "x=" + "a" * MAX_URL_BYTES
    resp = client.generic(
        method.upper(), f"{path}?{query}", json.dumps(MESSAGE), content_type="application/json"
    )
    error = assert_envelope(resp, 414, "url")
    assert error["code"] == "url_too_long"
    assert snapshot(client.tenant) == before
    # At the limit, the URL reaches the view (which names the unknown parameter).
    at_limit = "x=" + "a" * (MAX_URL_BYTES - len(path) - 3)
    assert_envelope(client.get(f"{path}?{at_limit}"), 400, "x")


@pytest.mark.parametrize("path", ["/v1/messages", "/receipts/twilio/"])
def test_a_chunked_body_is_a_411_naming_content_length(client, existing, path):
    # Django reads a body by its Content-Length alone: a chunked one was read as empty ("to" missing).
    before = snapshot(client.tenant)
    resp = client.generic(
        "POST", path, json.dumps(MESSAGE), content_type="application/json", HTTP_TRANSFER_ENCODING="chunked"
    )
    assert assert_envelope(resp, 411, "Content-Length")["code"] == "length_required"
    assert snapshot(client.tenant) == before
