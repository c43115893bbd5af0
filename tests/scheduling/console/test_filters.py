"""The `to` filter of GET /v1/messages and GET /v1/schedules is read as the `to` field is: a `+` left
unencoded in the query string (which arrives as a space) still means `+`, separators are tolerated, and
a value that can never be a recipient is a 400 naming `to` instead of an empty page."""

from __future__ import annotations

import pytest

from tests.factories import RECIPIENT

pytestmark = pytest.mark.django_db

OTHER = "+12025550143"

SAME_RECIPIENT = [
    "to=+14155550123",  # the + unencoded: Django reads " 14155550123"
    "to=%2B14155550123",
    "to=%2B1%20415%20555%200123",
    "to=+1+415+555+0123",  # every separator unencoded
    "to=%2B1-415-555-0123",
    "to=%2B1%20(415)%20555-0123",
]
NOT_A_RECIPIENT = [
    "to=14155550123",  # no +, and the field requires one
    "to=abc",
    "to=%2B1555",
    "to=+1555",
    "to=%2B14155550123%00",
    "to=%20%20",
    "to=%2B" + "1" * 40,
]


@pytest.fixture
def two_recipients(api):
    for to in (RECIPIENT, OTHER):
        resp = api.post("/v1/messages", {"to": to, "body": "hi"}, format="json")
        assert resp.status_code == 201, resp.content
        resp = api.post(
            "/v1/schedules",
            {
                "to": to,
                "body": "hi",
                "rrule": "FREQ=DAILY",
                "start": "2030-01-01T09:00:00",
                "timezone": "UTC",
            },
            format="json",
        )
        assert resp.status_code == 201, resp.content
    return api


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/schedules"])
@pytest.mark.parametrize("query", SAME_RECIPIENT)
def test_to_filter_matches_the_number_however_the_plus_arrives(two_recipients, path, query):
    resp = two_recipients.get(f"{path}?{query}")
    assert resp.status_code == 200, resp.content
    assert [row["to"] for row in resp.json()["results"]] == [RECIPIENT]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/schedules"])
@pytest.mark.parametrize("query", NOT_A_RECIPIENT)
def test_to_filter_that_cannot_be_a_number_is_a_400_naming_to(two_recipients, path, query):
    resp = two_recipients.get(f"{path}?{query}")
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["code"] == "invalid" and list(error["fields"]) == ["to"]


@pytest.mark.parametrize(
    ("path", "query", "name"),
    [
        ("/v1/messages", "stauts=sent", "stauts"),
        ("/v1/messages", "to=%2B14155550123&dueAfter=2026-01-01T00:00:00Z", "dueAfter"),
        ("/v1/messages", "=1", ""),
        ("/v1/schedules", "state=active", "state"),
        ("/v1/schedules", "created_after=2026-01-01T00:00:00Z", "created_after"),
    ],
)
def test_unknown_query_parameter_is_a_400_naming_it(two_recipients, path, query, name):
    resp = two_recipients.get(f"{path}?{query}")
    assert resp.status_code == 400, resp.content
    assert list(resp.json()["error"]["fields"]) == [name]


@pytest.mark.parametrize("suffix", ["occurrences?counts=3", "messages?page=2"])
def test_unknown_query_parameter_of_a_schedule_read_is_a_400_naming_it(two_recipients, suffix):
    sid = two_recipients.get("/v1/schedules").json()["results"][0]["id"]
    resp = two_recipients.get(f"/v1/schedules/{sid}/{suffix}")
    assert resp.status_code == 400, resp.content
    assert list(resp.json()["error"]["fields"]) == [suffix.split("?")[1].split("=")[0]]
