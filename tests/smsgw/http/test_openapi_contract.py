"""The served OpenAPI schema against real responses: every operation is called through the Django test
client, on its happy path and its error paths, and each response (status, headers, body) is validated with
openapi-core against the operation's documented responses. Objects are validated strictly (a key the
schema does not name is a mismatch), and the walk fails if an operation of the schema was not exercised."""

from __future__ import annotations

import copy
import json
import re
from datetime import timedelta

import pytest
from django.http import HttpResponse
from django.urls import resolve
from django.utils import timezone
from openapi_core import Config, OpenAPI
from openapi_core.contrib.django import DjangoOpenAPIRequest, DjangoOpenAPIResponse
from rest_framework.test import APIClient

from receipts.models import WebhookDelivery, WebhookStatus
from scheduling.lifecycle import transitions
from scheduling.models import Campaign, Message, Status
from smsgw.models import ApiKey
from tests.factories import RECIPIENT, message, tenant_with_key

pytestmark = pytest.mark.django_db

METHODS = ("get", "put", "post", "delete", "patch")


def strict(schema):
    """Every object that lists its properties accepts only those (OpenAPI's default accepts any extra)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


def served_schema() -> dict:
    resp = APIClient().get("/v1/openapi.json")
    assert resp.status_code == 200
    return resp.json()


class Contract:
    """A test client whose every answer is checked against the schema, with a record of what was seen."""

    def __init__(self, spec: dict, key: str):
        self.spec = spec
        # openapi-core reads application/json only; an error's application/problem+json is JSON too.
        config = Config(extra_media_type_deserializers={"application/problem+json": json.loads})
        self.openapi = OpenAPI.from_dict(strict(copy.deepcopy(spec)), config=config)
        self.operations = {(path, m) for path, ops in spec["paths"].items() for m in ops if m in METHODS}
        self.seen: dict[tuple[str, str], set[int]] = {}
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        self.key = key

    def call(self, method: str, path: str, expect: int, *, auth: str | None = "key", **kwargs):
        client = APIClient()
        if auth:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.key if auth == 'key' else auth}")
        if "data" in kwargs and "format" not in kwargs and "content_type" not in kwargs:
            kwargs["format"] = "json"
        resp = getattr(client, method)(path, **kwargs)
        if resp.streaming:  # a file download: validated as the whole body it streams
            resp = _read_whole(resp)
        assert resp.status_code == expect, (method, path, resp.status_code, resp.content[:500])
        if resp.wsgi_request.resolver_match is None:  # answered by the API's edge before routing
            resp.wsgi_request.resolver_match = resolve(resp.wsgi_request.path)
        request = DjangoOpenAPIRequest(resp.wsgi_request)
        # Raises with the mismatch (undocumented status, body or header not matching its schema).
        self.openapi.validate_response(request, DjangoOpenAPIResponse(resp))
        self.headers_declared(request.path_pattern, method, resp)
        self.seen.setdefault((request.path_pattern, method), set()).add(resp.status_code)
        if resp.get("Content-Type", "").startswith(("application/json", "application/problem+json")):
            body = resp.json() if resp.content else None
            assert not odd_timestamps(body), (method, path, odd_timestamps(body))
            return body
        return resp.content

    def headers_declared(self, path: str, method: str, resp) -> None:
        """Every header of the answer that is part of the API (not HTTP's own or the security middleware's)
        is declared on the operation's response for this status."""
        response = self.spec["paths"][path][method]["responses"].get(str(resp.status_code), {})
        declared = {name.lower() for name in response.get("headers", {})}
        undeclared = {name for name in resp.headers if name.lower() not in declared | TRANSPORT_HEADERS}
        assert not undeclared, (method, path, resp.status_code, sorted(undeclared))


# Headers of HTTP itself and of Django's security middleware: not part of what a client reads.
TRANSPORT_HEADERS = {
    "content-type",
    "content-length",
    "vary",
    "allow",
    "x-frame-options",
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
    "cross-origin-resource-policy",
    "strict-transport-security",
    "content-security-policy",
}


# An instant as the API writes every one (smsgw.values.timeutil.utc_text, docs/api.md "Timestamps"): UTC
# with Z, microseconds only when there are any. Anything with a date, a time and an offset or a Z that
# is not written so is a mismatch; a local wall time (no offset) is not an instant.
INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?(\.\d+)?(Z|[+-]\d\d:?\d\d)", re.IGNORECASE)
CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")
# The client's own words, echoed as given: a message's requested send_at.
AS_GIVEN = {"requested.send_at"}


def odd_timestamps(value, where: str = "") -> list[tuple[str, str]]:
    """Every (key path, value) in a JSON body that looks like an instant and is not in the one format."""
    if isinstance(value, dict):
        return [o for k, v in value.items() for o in odd_timestamps(v, f"{where}.{k}".lstrip("."))]
    if isinstance(value, list):
        return [o for v in value for o in odd_timestamps(v, where)]
    if isinstance(value, str) and not any(where.endswith(k) for k in AS_GIVEN):
        for found in INSTANT.finditer(value):
            if not CANONICAL.fullmatch(found.group()):
                return [(where, value)]
    return []


def _read_whole(streamed):
    """A streamed response (a download) as a plain one holding the whole body, for openapi-core."""
    plain = HttpResponse(b"".join(streamed.streaming_content), status=streamed.status_code)
    for name, value in streamed.headers.items():
        plain[name] = value
    plain.wsgi_request = streamed.wsgi_request
    plain.resolver_match = streamed.resolver_match
    return plain


@pytest.fixture
def contract(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    tenant, key = tenant_with_key("acme")
    c = Contract(served_schema(), key)
    c.tenant = tenant
    return c


def soon(hours: float = 2) -> str:
    at = timezone.now() + timedelta(hours=hours)
    return at.replace(second=0, microsecond=0, tzinfo=None).isoformat()


def messages_walk(c: Contract) -> None:
    # One send_at for the keyed request and its repeat: soon() is cut to the minute, so two calls either
    # side of a minute's turn would differ (and the repeat would be a different request: 422).
    keyed_at = soon()
    c.call("post", "/v1/messages", 201, data={"to": RECIPIENT, "body": "now"})
    later = c.call(
        "post",
        "/v1/messages",
        201,
        data={
            "to": RECIPIENT,
            "body": "later",
            "send_at": keyed_at,
            "timezone": "America/New_York",
            "metadata": {"order": "A-1"},
            "quiet_hours": {"start": "21:00", "end": "08:00"},
            "recipient_timezone": "America/New_York",
        },
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    c.call(
        "post",
        "/v1/messages",
        200,
        data={
            "to": RECIPIENT,
            "body": "later",
            "send_at": keyed_at,
            "timezone": "America/New_York",
            "metadata": {"order": "A-1"},
            "quiet_hours": {"start": "21:00", "end": "08:00"},
            "recipient_timezone": "America/New_York",
        },
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    c.call("post", "/v1/messages", 422, data={"to": RECIPIENT, "body": "other"}, HTTP_IDEMPOTENCY_KEY="k-1")
    c.call("post", "/v1/messages", 400, data={"to": RECIPIENT, "body": "x", "timezone": "Mars/Olympus"})
    c.call("post", "/v1/messages", 400, data="{not json", content_type="application/json")
    c.call("post", "/v1/messages", 415, data="to=1", content_type="text/plain")
    c.call("post", "/v1/messages", 401, auth=None, data={"to": RECIPIENT, "body": "x"})
    c.call("post", "/v1/messages", 401, auth="sk_nope_nope", data={"to": RECIPIENT, "body": "x"})

    answer = c.call(
        "post",
        "/v1/messages/batch",
        200,
        data={
            "messages": [
                {"to": RECIPIENT, "body": "batch", "idempotency_key": "b-1"},
                {"to": "+1555", "body": "bad"},
                {"to": RECIPIENT, "body": "batch", "send_at": soon(), "timezone": "Europe/London"},
            ]
        },
    )
    assert [r["status"] for r in answer["results"]] == [201, 400, 201]
    c.call("post", "/v1/messages/batch", 400, data={"messages": []})

    page = c.call("get", "/v1/messages", 200, data={"page_size": 1})
    assert len(page["results"]) == 1 and page["next"]
    c.call("get", page["next"], 200)
    c.call("get", "/v1/messages", 200, data={"status": "scheduled,queued", "to": RECIPIENT})
    c.call("get", "/v1/messages", 400, data={"status": "bogus"})
    c.call("get", "/v1/messages", 401, auth=None)

    mid = later["id"]
    c.call("get", f"/v1/messages/{mid}", 200)
    c.call("get", "/v1/messages/msg_unknown", 404)
    c.call("patch", f"/v1/messages/{mid}", 200, data={"body": "edited"})
    c.call("patch", f"/v1/messages/{mid}", 400, data={"sendAt": "tomorrow"})
    c.call("patch", "/v1/messages/msg_unknown", 404, data={"body": "x"})
    c.call("get", f"/v1/messages/{mid}/events", 200)
    c.call("get", "/v1/messages/msg_unknown/events", 404)
    c.call("post", f"/v1/messages/{mid}/cancel", 200)
    c.call("post", f"/v1/messages/{mid}/cancel", 200)  # a repeat is the same answer
    c.call("patch", f"/v1/messages/{mid}", 409, data={"body": "too late"})
    c.call("post", "/v1/messages/msg_unknown/cancel", 404)

    # A message that has been sent: its timestamps and provider fields are filled in.
    sent = message(c.tenant)
    steps = [  # the kinds the pipeline writes (EventKind, an enum of the schema)
        (Status.SCHEDULED, Status.QUEUED, "queued"),
        (Status.QUEUED, Status.SENDING, "attempt_started"),
        (Status.SENDING, Status.SENT, "sent"),
    ]
    for from_status, to_status, kind in steps:
        transitions.transition(
            sent.pk,
            from_statuses=[from_status],
            to_status=to_status,
            kind=kind,
            set_fields={"provider_message_id": "SM123"} if to_status == Status.SENT else None,
        )
    c.call("get", f"/v1/messages/{sent.public_id}", 200)
    c.call("get", f"/v1/messages/{sent.public_id}/events", 200)
    c.call("post", f"/v1/messages/{sent.public_id}/cancel", 409)


def campaigns_walk(c: Contract) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    from scheduling.campaigns.make import campaign_make

    people = [{"phone": RECIPIENT, "first_name": "Ann"}, {"phone": "+1415", "first_name": "Bad"}]
    body = {"template": "Hi {first_name}", "send_at": soon(), "timezone": "UTC", "recipients": people}
    made = c.call("post", "/v1/campaigns", 202, data=body, HTTP_IDEMPOTENCY_KEY="c-1")
    c.call("post", "/v1/campaigns", 200, data=body, HTTP_IDEMPOTENCY_KEY="c-1")
    c.call("post", "/v1/campaigns", 422, data={**body, "name": "other"}, HTTP_IDEMPOTENCY_KEY="c-1")
    c.call("post", "/v1/campaigns", 400, data={**body, "template": "Hi {first_name"})
    c.call("post", "/v1/campaigns", 401, auth=None, data=body)
    csv_file = SimpleUploadedFile("list.csv", b"phone,first_name\n+14155550124,Bo\n", content_type="text/csv")
    form = {"template": "Hi {first_name}", "allow_duplicates": "true", "recipients": csv_file}
    c.call("post", "/v1/campaigns", 202, data=form, format="multipart")
    c.call("post", "/v1/campaigns", 400, data={"template": "Hi {first_name}"}, format="multipart")
    campaign_make(Campaign.objects.get(public_id=made["id"]).pk)

    cid = made["id"]
    c.call("get", "/v1/campaigns", 200, data={"page_size": 1})
    c.call("get", "/v1/campaigns", 400, data={"page_size": 0})
    c.call("get", f"/v1/campaigns/{cid}", 200)
    c.call("get", "/v1/campaigns/cmp_unknown", 404)
    c.call("get", f"/v1/campaigns/{cid}/messages", 200, data={"status": "scheduled"})
    c.call("get", f"/v1/campaigns/{cid}/messages", 400, data={"status": "bogus"})
    c.call("get", "/v1/campaigns/cmp_unknown/messages", 404)
    c.call("get", f"/v1/campaigns/{cid}/errors", 200)
    c.call("get", f"/v1/campaigns/{cid}/errors", 400, data={"page_size": "x"})
    c.call("get", "/v1/campaigns/cmp_unknown/errors", 404)

    # `to`, the recipient's name everywhere; `phone` above is its deprecated alias. Error rows carry both.
    people = [{"to": RECIPIENT, "first_name": "Ann"}, {"to": "+1415", "first_name": "Bad"}]
    made = c.call("post", "/v1/campaigns", 202, data={"template": "Hi {first_name}", "recipients": people})
    both = [{"to": RECIPIENT, "phone": "+14155550124", "first_name": "Ann"}]
    c.call("post", "/v1/campaigns", 400, data={"template": "Hi {first_name}", "recipients": both})
    csv_file = SimpleUploadedFile("list.csv", b"to,first_name\n+14155550124,Bo\n", content_type="text/csv")
    c.call(
        "post",
        "/v1/campaigns",
        202,
        data={"template": "Hi {first_name}", "recipients": csv_file},
        format="multipart",
    )
    campaign_make(Campaign.objects.get(public_id=made["id"]).pk)
    [error] = c.call("get", f"/v1/campaigns/{made['id']}/errors", 200)["results"]
    assert (error["to"], error["phone"], error["field"]) == ("+1415", "+1415", "to")


def schedules_walk(c: Contract) -> None:
    body = {
        "to": RECIPIENT,
        "body": "Take your medicine",
        "rrule": "FREQ=HOURLY;INTERVAL=6",
        "start": soon(1),
        "timezone": "UTC",
        "exdate": ["2031-01-01"],
        "quiet_hours": {"start": "21:00", "end": "08:00"},
    }
    sid = c.call("post", "/v1/schedules", 201, data=body)["id"]
    keyed = {**body, "start": soon(3), "quiet_hours": {"enabled": False}}
    c.call("post", "/v1/schedules", 201, data=keyed, HTTP_IDEMPOTENCY_KEY="s-1")
    c.call("post", "/v1/schedules", 200, data=keyed, HTTP_IDEMPOTENCY_KEY="s-1")
    c.call("post", "/v1/schedules", 422, data={**keyed, "body": "other"}, HTTP_IDEMPOTENCY_KEY="s-1")
    c.call("post", "/v1/schedules", 400, data={**body, "rrule": "FREQ=SOMETIMES"})
    c.call("post", "/v1/schedules", 401, auth=None, data=body)

    c.call("get", "/v1/schedules", 200, data={"page_size": 1})
    c.call("get", "/v1/schedules", 200, data={"status": "active", "to": RECIPIENT})
    c.call("get", "/v1/schedules", 400, data={"status": "bogus"})

    c.call("get", f"/v1/schedules/{sid}", 200)
    c.call("get", "/v1/schedules/sch_unknown", 404)
    c.call("patch", f"/v1/schedules/{sid}", 200, data={"body": "Take two"})
    c.call("patch", f"/v1/schedules/{sid}", 400, data={"rrule": "nope"})
    c.call("patch", "/v1/schedules/sch_unknown", 404, data={"body": "x"})

    c.call("get", f"/v1/schedules/{sid}/occurrences", 200, data={"count": 3})
    c.call("get", f"/v1/schedules/{sid}/occurrences", 400, data={"count": 0})
    c.call("get", "/v1/schedules/sch_unknown/occurrences", 404)
    c.call("get", f"/v1/schedules/{sid}/versions", 200)
    c.call("get", "/v1/schedules/sch_unknown/versions", 404)
    c.call("get", f"/v1/schedules/{sid}/messages", 200, data={"page_size": 2})
    c.call("get", "/v1/schedules/sch_unknown/messages", 404)

    c.call("post", f"/v1/schedules/{sid}/resume", 200)  # already active: the same answer
    c.call("post", f"/v1/schedules/{sid}/pause", 200)
    c.call("post", f"/v1/schedules/{sid}/pause", 200)
    c.call("post", "/v1/schedules/sch_unknown/pause", 404)
    c.call("post", f"/v1/schedules/{sid}/resume", 200)
    c.call("post", "/v1/schedules/sch_unknown/resume", 404)
    c.call("post", f"/v1/schedules/{sid}/cancel", 200)
    c.call("post", f"/v1/schedules/{sid}/cancel", 200)
    c.call("post", "/v1/schedules/sch_unknown/cancel", 404)
    c.call("post", f"/v1/schedules/{sid}/pause", 409)
    c.call("post", f"/v1/schedules/{sid}/resume", 409)
    c.call("patch", f"/v1/schedules/{sid}", 409, data={"body": "x"})
    c.call("get", f"/v1/schedules/{sid}/occurrences", 200)


def settings_walk(c: Contract) -> None:
    c.call("get", "/v1/quiet-hours", 200)
    c.call(
        "put", "/v1/quiet-hours", 200, data={"start": "21:00", "end": "08:00", "exempt_transactional": True}
    )
    c.call("put", "/v1/quiet-hours", 400, data={"start": "25:00", "end": "08:00"})
    c.call("delete", "/v1/quiet-hours", 200)
    c.call("get", "/v1/quiet-hours", 401, auth=None)

    c.call("get", "/v1/retention", 200)
    c.call("put", "/v1/retention", 200, data={"content_days": 7, "record_days": 90})
    c.call("put", "/v1/retention", 400, data={"content_days": 90, "record_days": 7})
    c.call("get", "/v1/retention", 401, auth=None)

    c.call("get", "/v1/keywords", 200)
    rules = [
        {"keyword": "c", "action": "cancel", "reply": "Cancelled."},
        {"keyword": "Y", "action": "confirm"},
    ]
    c.call("put", "/v1/keywords", 200, data={"rules": rules})
    c.call("put", "/v1/keywords", 400, data={"rules": [{"keyword": "two words", "action": "cancel"}]})
    c.call("put", "/v1/keywords", 400, data={"rules": [{"keyword": "C", "action": "delete"}]})
    c.call("put", "/v1/keywords", 400, data={"rules": [], "extra": 1})
    c.call("get", "/v1/keywords", 401, auth=None)

    c.call("get", "/v1/capacity", 200)
    c.call("put", "/v1/capacity/senders/+14155550100", 200, data={"segments_per_second": 2})
    c.call("put", "/v1/capacity/senders/+14155550100", 400, data={"segments_per_second": -1})
    c.call("put", "/v1/capacity/senders/+14155550100?provider=twilio", 200, data={"segments_per_second": 2})
    c.call("put", "/v1/capacity/senders/+14155550100?provider=nope", 400, data={"segments_per_second": 2})
    c.call("put", "/v1/capacity/senders/!!", 400, data={"segments_per_second": 1})
    c.call("delete", "/v1/capacity/senders/+14155550100", 200)
    c.call("delete", "/v1/capacity/senders/!!", 400)
    other, _ = tenant_with_key("other", default_from="+14155550122")  # another tenant's own sender
    from delivery.flow import capacity

    capacity.sender_capacity_set(tenant=other, sender="+14155550122", segments_per_second=0.9)
    c.call("put", "/v1/capacity/senders/+14155550122", 403, data={"segments_per_second": 1})
    c.call("delete", "/v1/capacity/senders/+14155550122", 403)

    c.call("get", "/v1/webhook", 200)
    c.call("put", "/v1/webhook", 200, data={"url": "https://127.0.0.1:9/hook"})
    c.call("put", "/v1/webhook", 200, data={"url": "https://127.0.0.1:9/hook2"})
    c.call("put", "/v1/webhook", 400, data={"url": "https://[/"})
    c.call("get", "/v1/webhook", 200)

    msg = message(c.tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    delivery = WebhookDelivery.objects.get(tenant=c.tenant)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=WebhookStatus.DEAD)
    page = c.call("get", "/v1/webhook-deliveries", 200, data={"status": "dead", "page_size": 1})
    assert [d["id"] for d in page["results"]] == [delivery.webhook_id]
    c.call("get", "/v1/webhook-deliveries", 200, data={"event_type": "message.status_changed"})
    c.call(
        "get",
        "/v1/webhook-deliveries",
        200,
        data={"message": msg.public_id, "created_after": "2026-01-01T00:00:00Z"},
    )
    c.call("get", "/v1/webhook-deliveries", 400, data={"status": "gone"})
    c.call("post", f"/v1/webhook-deliveries/{delivery.webhook_id}/replay", 200)
    c.call("get", "/v1/webhook-deliveries", 200)  # pending again, with its next attempt
    c.call("post", "/v1/webhook-deliveries/wh_unknown/replay", 404)
    c.call("delete", "/v1/webhook", 204)
    c.call("delete", "/v1/webhook", 401, auth=None)


def suppressions_walk(c: Contract) -> None:
    c.call("post", "/v1/suppressions", 201, data={"number": "+14155550140"})
    c.call("post", "/v1/suppressions", 200, data={"number": "+14155550140"})
    c.call("post", "/v1/suppressions", 201, data={"number": "+14155550141", "sender": "+14155550100"})
    c.call("post", "/v1/suppressions", 400, data={"number": "nope"})
    c.call("post", "/v1/suppressions", 400, data={"number": "+14155550140", "sender": "!!"})
    c.call("post", "/v1/suppressions", 400, data={"number": "+14155550140", "extra": 1})
    c.call("get", "/v1/suppressions", 200, data={"page_size": 1})
    c.call("get", "/v1/suppressions", 200, data={"number": "+14155550141", "sender": "+14155550100"})
    c.call("get", "/v1/suppressions", 400, data={"number": "nope"})
    c.call("get", "/v1/suppressions", 400, data={"bogus": "1"})
    c.call("delete", "/v1/suppressions?number=%2B14155550141&sender=%2B14155550100", 204)
    c.call("delete", "/v1/suppressions?number=%2B14155550141&sender=%2B14155550100", 404)
    c.call("delete", "/v1/suppressions", 400)
    c.call("delete", "/v1/suppressions?number=%2B14155550140", 204)
    # `to`, the recipient's name everywhere; `number` above is its deprecated alias. Answers carry both.
    added = c.call("post", "/v1/suppressions", 201, data={"to": "+14155550142"})
    assert added["to"] == added["number"] == "+14155550142"
    c.call("post", "/v1/suppressions", 200, data={"to": "+14155550142", "number": "+14155550142"})
    c.call("post", "/v1/suppressions", 400, data={"to": "+14155550142", "number": "+14155550143"})
    c.call("post", "/v1/suppressions", 400, data={"sender": "+14155550100"})
    listed = c.call("get", "/v1/suppressions", 200, data={"to": "+14155550142"})["results"]
    assert [(e["to"], e["number"]) for e in listed] == [("+14155550142", "+14155550142")]
    c.call("get", "/v1/suppressions", 400, data={"to": "+14155550142", "number": "+14155550143"})
    c.call("delete", "/v1/suppressions?to=%2B14155550142&number=%2B14155550143", 400)
    c.call("delete", "/v1/suppressions?to=%2B14155550142", 204)


def routes_walk(c: Contract) -> None:
    from tests.delivery.routing.helpers import route_rule

    route_rule(c.tenant, "gb", [("vonage", "", "ACME", 2), ("twilio", "", "", 0)], country="GB")
    c.call("get", "/v1/routes", 200)
    c.call("get", "/v1/routes", 400, data={"bogus": "1"})
    c.call("get", "/v1/routes/resolve", 200, data={"to": "+447400123456", "priority": "bulk"})
    c.call("get", "/v1/routes/resolve", 200, data={"to": "+14155550123"})
    c.call("get", "/v1/routes/resolve", 400, data={"to": "nope"})
    c.call("get", "/v1/routes/resolve", 400, data={"to": "+14155550123", "priority": "urgent"})
    c.call("get", "/v1/routes/resolve", 400)


def exports_walk(c: Contract) -> None:
    from retention.exports import exports_run
    from tests.retention.exporting import finished

    finished(c.tenant, timezone.now() - timedelta(days=1))
    exports_run(now=timezone.now() + timedelta(days=1))  # that day is over, whatever the hour
    page = c.call("get", "/v1/exports", 200, data={"page_size": 1})
    c.call("get", "/v1/exports", 400, data={"bogus": "1"})
    eid = page["results"][0]["id"]
    c.call("get", f"/v1/exports/{eid}", 200)
    c.call("get", "/v1/exports/exp_unknown", 404)
    assert c.call("get", f"/v1/exports/{eid}/download", 200)[:2] == b"\x1f\x8b"  # gzip's magic
    c.call("get", "/v1/exports/exp_unknown/download", 404)


def inbound_walk(c: Contract, settings) -> None:
    """Replies (docs/inbound.md): the list, one, and a conversation, with their refusals."""
    from inbound.process import inbound_process_due
    from tests.inbound.helpers import configure, twilio_form, twilio_post

    configure(settings)
    sent = message(c.tenant, to=RECIPIENT, status=Status.DELIVERED)
    Message.objects.filter(pk=sent.pk).update(sent_at=timezone.now() - timedelta(minutes=1))
    assert twilio_post(twilio_form("See you then", RECIPIENT, c.tenant.default_from)).status_code == 200
    inbound_process_due()
    page = c.call("get", "/v1/inbound", 200, data={"page_size": 1, "from": RECIPIENT})
    c.call("get", "/v1/inbound", 400, data={"from": "nope"})
    c.call("get", "/v1/inbound", 400, data={"received_after": "yesterday"})
    iid = page["results"][0]["id"]
    assert page["results"][0]["in_reply_to"] == sent.public_id
    c.call("get", f"/v1/inbound/{iid}", 200)
    c.call("get", "/v1/inbound/in_unknown", 404)
    talk = c.call("get", f"/v1/conversations/{RECIPIENT}", 200, data={"page_size": 1})
    assert [i["direction"] for i in talk["results"]] == ["outbound"] and talk["next"]
    c.call("get", f"/v1/conversations/{RECIPIENT}", 400, data={"cursor": "garbage"})
    c.call("get", "/v1/conversations/nope", 400)


def campaigns_control_walk(c: Contract) -> None:
    from tests.factories import campaign_with_messages

    campaign, _ = campaign_with_messages(c.tenant, 3)
    cid = campaign.public_id
    c.call("post", f"/v1/campaigns/{cid}/resume", 200)  # already active: the same answer
    c.call("post", f"/v1/campaigns/{cid}/pause", 200)
    c.call("post", f"/v1/campaigns/{cid}/pause", 200)
    c.call("post", "/v1/campaigns/cmp_unknown/pause", 404)
    c.call("post", f"/v1/campaigns/{cid}/resume", 200)
    c.call("post", "/v1/campaigns/cmp_unknown/resume", 404)
    c.call("post", f"/v1/campaigns/{cid}/cancel", 200)
    c.call("post", f"/v1/campaigns/{cid}/cancel", 200)
    c.call("post", "/v1/campaigns/cmp_unknown/cancel", 404)
    c.call("post", f"/v1/campaigns/{cid}/pause", 409)
    c.call("post", f"/v1/campaigns/{cid}/resume", 409)
    done, _ = campaign_with_messages(c.tenant, 0, status="completed")
    c.call("post", f"/v1/campaigns/{done.public_id}/cancel", 409)


def retention_walk(c: Contract) -> None:
    """Redaction and erasure (docs/erasure.md): done, repeated, refused."""
    sent = message(c.tenant, status=Status.DELIVERED)
    c.call("post", f"/v1/messages/{sent.public_id}/redact", 200)
    c.call("post", f"/v1/messages/{sent.public_id}/redact", 200)
    c.call("post", f"/v1/messages/{message(c.tenant).public_id}/redact", 409)
    c.call("post", "/v1/messages/msg_unknown/redact", 404)
    c.call("post", "/v1/recipients/erase", 200, data={"to": RECIPIENT})
    c.call("post", "/v1/recipients/erase", 400, data={"to": "+1555"})
    c.call("post", "/v1/recipients/erase", 400, data={})


def unauthenticated_walk(c: Contract) -> None:
    """Every operation, without a key and with a revoked one: 401 in the envelope."""
    fill = {
        "{public_id}": "msg_x",
        "{webhook_id}": "wh_x",
        "{sender}": "+14155550100",
        "{to}": "+14155550101",
    }
    _, revoked = tenant_with_key("revoked")
    ApiKey.objects.filter(tenant__slug="revoked").update(revoked_at=timezone.now())
    for path, method in sorted(c.operations):
        for name, value in fill.items():
            path = path.replace(name, value)
        c.call(method, path, 401, auth=None)
        c.call(method, path, 401, auth=revoked)


def hostile_walk(c: Contract, settings) -> None:
    """What the API's edge refuses (smsgw.http.boundary): an oversized body on every operation that takes one
    is a 413, a NUL in a query parameter a 400 naming it; both in the documented envelope."""
    settings.API_MAX_BODY_BYTES = 4096
    big = {"body": "x" * 5000}
    fill = {
        "{public_id}": "msg_x",
        "{webhook_id}": "wh_x",
        "{sender}": "+14155550100",
        "{to}": "+14155550101",
    }
    for path, method in sorted(c.operations):
        op = c.spec["paths"][path][method]
        for name, value in fill.items():
            path = path.replace(name, value)
        if "requestBody" in op:
            assert c.call(method, path, 413, data=big)["error"]["code"] == "request_too_large"
        if any(p["in"] == "query" for p in op.get("parameters", [])):
            query = next(p["name"] for p in op["parameters"] if p["in"] == "query")
            error = c.call(method, f"{path}?{query}=%00", 400)["error"]
            assert list(error["fields"]) == [query], error


def test_every_operation_answers_what_the_schema_documents(contract, settings):
    messages_walk(contract)
    schedules_walk(contract)
    campaigns_walk(contract)
    settings_walk(contract)
    suppressions_walk(contract)
    routes_walk(contract)
    exports_walk(contract)
    inbound_walk(contract, settings)
    campaigns_control_walk(contract)
    retention_walk(contract)
    unauthenticated_walk(contract)
    hostile_walk(contract, settings)
    missing = sorted(op for op in contract.operations if op not in contract.seen)
    assert not missing, f"operations never exercised: {missing}"
    # Each operation was seen answering both a success and an error, and only documented codes.
    for op, codes in contract.seen.items():
        assert any(c < 300 for c in codes) and any(c >= 400 for c in codes), (op, codes)


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/v1/messages", "get"),
        ("/v1/schedules", "get"),
        ("/v1/suppressions", "get"),
        ("/v1/schedules/{public_id}/messages", "get"),
        ("/v1/messages/{public_id}/events", "get"),
        ("/v1/schedules/{public_id}/versions", "get"),
        ("/v1/schedules/{public_id}/occurrences", "get"),
    ],
)
def test_lists_are_documented_as_the_objects_they_return(path, method):
    spec = served_schema()
    ref = spec["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    component = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert component["type"] == "object"
    if path in ("/v1/messages", "/v1/schedules", "/v1/schedules/{public_id}/messages"):
        assert set(component["properties"]) == {"next", "previous", "results"}


def test_every_authenticated_operation_documents_its_errors_and_the_bearer_scheme():
    spec = served_schema()
    assert spec["components"]["securitySchemes"]["ApiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "sk_<prefix>_<secret>",
        "description": spec["components"]["securitySchemes"]["ApiKey"]["description"],
    }
    problem = {"$ref": "#/components/schemas/Problem"}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert op["security"] == [{"ApiKey": []}], (path, method)
            for code in ("401", "429", "503"):
                content = op["responses"][code]["content"]
                assert list(content) == ["application/problem+json", "application/json"], (path, method)
                assert all(c["schema"] == problem for c in content.values()), (path, method)
            for code in ("429", "503"):  # 503: the database is unavailable (smsgw.http.unavailable)
                # And, on an operation reading a deprecated alias, Deprecation and Sunset.
                assert set(op["responses"][code]["headers"]) - {"Deprecation", "Sunset"} == {
                    "Request-Id",
                    "traceparent",
                    "Retry-After",
                    "RateLimit-Limit",
                    "RateLimit-Remaining",
                    "RateLimit-Reset",
                    "RateLimit-Policy",
                }
            if "requestBody" in op:
                assert {"400", "413", "415"} <= set(op["responses"]), (path, method)
            if "{public_id}" in path or "{webhook_id}" in path:
                assert "404" in op["responses"], (path, method)
    for path, method in (("/v1/messages", "post"), ("/v1/messages/{public_id}", "patch")):
        assert "quota_exceeded" in spec["paths"][path][method]["responses"]["429"]["description"]


def test_the_timestamp_check_finds_any_other_format():
    assert odd_timestamps({"a": "2026-12-05T18:30:00Z", "b": ["2026-12-05T18:30:00.250000Z"]}) == []
    assert odd_timestamps({"local_time": "2026-12-05T09:30:00", "day": "2026-12-05"}) == []
    for odd in (
        "2026-12-05T18:30:00+00:00",
        "2026-12-05T13:30:00-05:00",
        "2026-12-05T18:30Z",
        "x at 2026-12-05T18:30:00+0000",
    ):
        assert odd_timestamps({"m": {"at": odd}}) == [("m.at", odd)]
    assert odd_timestamps({"requested": {"send_at": "2026-12-05T13:30:00-05:00"}}) == []


def test_the_validator_rejects_what_the_schema_does_not_document(contract):
    """The contract check itself: an undocumented key, a wrong type or an undocumented status fail."""
    from django.http import JsonResponse
    from openapi_core.exceptions import OpenAPIError

    resp = contract.client.get("/v1/quiet-hours")
    request = DjangoOpenAPIRequest(resp.wsgi_request)
    good = resp.json()
    answered = {"Request-Id": resp["Request-Id"]}
    contract.openapi.validate_response(request, DjangoOpenAPIResponse(JsonResponse(good, headers=answered)))
    # Without the Request-Id every answer declares.
    with pytest.raises(OpenAPIError):
        contract.openapi.validate_response(request, DjangoOpenAPIResponse(JsonResponse(good)))
    for body, status in [
        ({**good, "surprise": 1}, 200),
        ({**good, "exempt_transactional": "yes"}, 200),
        ([good], 200),
        (good, 418),
        ({"detail": "Not found."}, 404),
    ]:
        with pytest.raises(OpenAPIError):
            contract.openapi.validate_response(
                request,
                DjangoOpenAPIResponse(JsonResponse(body, status=status, safe=False, headers=answered)),
            )


def test_real_quota_and_rate_limit_refusals_match_the_schema(settings):
    """The 429s of tenant limits (docs/limits.md, scheduling.limits: skipped where it is not installed) against
    the shared error responses this schema documents for them."""
    pytest.importorskip("scheduling.limits.models")
    settings.RATELIMIT_URL = "database"
    settings.API_RATE_PER_SECOND = 0
    _, key = tenant_with_key("limited", daily_message_quota=1)
    c = Contract(served_schema(), key)
    c.call("post", "/v1/messages", 201, data={"to": RECIPIENT, "body": "one"})
    error = c.call("post", "/v1/messages", 429, data={"to": RECIPIENT, "body": "two"})["error"]
    assert error["code"] == "quota_exceeded" and error["quota"] == "daily_message_quota"
    settings.API_RATE_PER_SECOND = 1
    settings.API_RATE_BURST_SECONDS = 1.0
    for _ in range(5):
        c.client.get("/v1/quiet-hours")
    assert c.call("get", "/v1/quiet-hours", 429)["error"]["code"] == "rate_limited"
    c.call("get", "/v1/messages", 429)


def _examples(spec: dict):
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for media in op.get("requestBody", {}).get("content", {}).values():
                for name, ex in (media.get("examples") or {}).items():
                    yield f"{method} {path} request {name}", media["schema"], ex["value"]
            for code, response in op["responses"].items():
                for media in (response.get("content") or {}).values():
                    for name, ex in (media.get("examples") or {}).items():
                        yield f"{method} {path} {code} {name}", media["schema"], ex["value"]
            for param in op.get("parameters", []):
                for name, ex in (param.get("examples") or {}).items():
                    yield f"{method} {path} ?{param['name']} {name}", param["schema"], ex["value"]


def test_every_example_in_the_reference_fits_its_schema():
    from jsonschema import Draft202012Validator

    spec = strict(served_schema())
    examples = list(_examples(spec))
    assert len(examples) > 100
    for where, schema, value in examples:
        errors = list(Draft202012Validator({**schema, "components": spec["components"]}).iter_errors(value))
        assert not errors, (where, [e.message for e in errors])


def test_the_common_calls_have_examples():
    spec = served_schema()
    names = {where.rsplit(" ", 1)[-1] for where, _, _ in _examples(spec)}
    assert {
        "SendNow",
        "SendAtALocalTimeInATimezone",
        "Reschedule",
        "EveryWeekdayAt08:30InBerlin",
        "QuotaExceeded",
        "RateLimited",
        "TooLateToCancel",
        "OneRecipient",
    } <= names
