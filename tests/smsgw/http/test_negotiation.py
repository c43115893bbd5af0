"""The API answers JSON whatever the Accept header says (smsgw.http.negotiation): DRF's 406 is not in the
contract, and the schema fuzz found it with a malformed header."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduling.models import Message
from tests.factories import RECIPIENT, tenant_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    _, key = tenant_with_key("accept")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.mark.parametrize("accept", ["aV91c[4fxY", "text/html", "application/xml;q=1", "*/*;q=nonsense"])
def test_any_accept_header_gets_the_json_answer(api, accept):
    listed = api.get("/v1/messages", HTTP_ACCEPT=accept)
    assert listed.status_code == 200 and listed["Content-Type"] == "application/json"
    created = api.post("/v1/messages", {"to": RECIPIENT, "body": "hi"}, format="json", HTTP_ACCEPT=accept)
    assert created.status_code == 201 and created.json()["to"] == RECIPIENT
    assert Message.objects.count() == 1


def test_an_unknown_explicit_format_is_still_refused(api):
    assert api.get("/v1/messages?format=xml").status_code == 404
    assert Message.objects.count() == 0


def test_the_schema_is_still_served_as_json():
    served = APIClient().get("/v1/openapi.json", HTTP_ACCEPT="aV91c[4fxY")
    assert served.status_code == 200 and served.json()["openapi"].startswith("3.")


@pytest.mark.parametrize(
    ("accept", "media_type"),
    [
        (None, "application/problem+json"),
        ("*/*", "application/problem+json"),
        ("application/problem+json", "application/problem+json"),
        ("application/json, application/problem+json", "application/problem+json"),
        ("text/html,application/xhtml+xml,*/*;q=0.8", "application/problem+json"),
        ("aV91c[4fxY", "application/problem+json"),
        ("application/json", "application/json"),
        ("application/json, */*;q=0.1", "application/json"),
        ("application/problem+json;q=0.2, application/json", "application/json"),
    ],
)
def test_an_error_is_problem_json_unless_the_client_prefers_plain_json(api, accept, media_type):
    """RFC 9457's media type by default; the same body as application/json to a client that asks for it."""
    headers = {"HTTP_ACCEPT": accept} if accept is not None else {}
    refused = api.post("/v1/messages", {"to": "x", "body": "hi"}, format="json", **headers)
    unknown = api.get("/v1/no-such-endpoint", **headers)  # answered by the edge, not DRF
    for resp in (refused, unknown):
        assert resp["Content-Type"] == media_type, (accept, resp.status_code)
        body = resp.json()
        assert body["error"]["code"] == body["code"] and body["status"] == resp.status_code
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "to"
    assert Message.objects.count() == 0
