"""Deprecation headers (docs/compatibility.md): an answer to a request that used a deprecated name (`phone`
in a campaign's JSON items or CSV header, `number` in /v1/suppressions' body or query) carries RFC 9745
`Deprecation` (`@<unix seconds>`), RFC 8594 `Sunset` (an HTTP-date) and `Link: <policy>; rel="deprecation"`;
a request that used only `to` gets none of them."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from smsgw.http.deprecation import ALIASES, HEADERS

pytestmark = pytest.mark.django_db

DEPRECATED_ON = datetime(2026, 12, 2, tzinfo=UTC)
TEMPLATE = "Hello {first_name}"


def assert_deprecated(resp, settings) -> None:
    assert re.fullmatch(r"@[0-9]+", resp["Deprecation"]), resp["Deprecation"]  # RFC 9745: an sf-date
    since = datetime.fromtimestamp(int(resp["Deprecation"][1:]), UTC)
    assert since == DEPRECATED_ON
    # RFC 8594: an HTTP-date (IMF-fixdate), at least 12 months after the deprecation (the policy).
    assert re.fullmatch(r"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT", resp["Sunset"])
    sunset = parsedate_to_datetime(resp["Sunset"])
    assert sunset >= since.replace(year=since.year + 1)
    assert resp["Link"] == f'<{settings.DEPRECATION_DOCS_URL}>; rel="deprecation"; type="text/html"'


def assert_current(resp) -> None:
    assert not any(resp.has_header(h) for h in HEADERS), dict(resp.headers)


def test_every_deprecated_name_is_a_recipient_alias_with_a_sunset_a_year_on():
    assert set(ALIASES) == {"phone", "number"}
    for alias in ALIASES.values():
        assert alias.instead == "to" and alias.sunset.replace(year=alias.since.year) == alias.since


def test_a_campaign_with_phone_in_its_json_items_is_answered_with_the_headers(api, settings):
    people = [{"phone": "+14155550123", "first_name": "Ann"}]
    resp = api.post(
        "/v1/campaigns",
        {"template": TEMPLATE, "recipients": people},
        format="json",
        HTTP_IDEMPOTENCY_KEY="c1",
    )
    assert resp.status_code == 202, resp.content
    assert_deprecated(resp, settings)
    again = api.post(
        "/v1/campaigns",
        {"template": TEMPLATE, "recipients": people},
        format="json",
        HTTP_IDEMPOTENCY_KEY="c1",
    )
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert_deprecated(again, settings)  # the replay answers a request that used it too

    mixed = [{"to": "+14155550124", "first_name": "Bo"}, {"phone": "+14155550125", "first_name": "Cy"}]
    assert_deprecated(
        api.post("/v1/campaigns", {"template": TEMPLATE, "recipients": mixed}, format="json"), settings
    )
    current = [{"to": "+14155550126", "first_name": "Di"}]
    resp = api.post("/v1/campaigns", {"template": TEMPLATE, "recipients": current}, format="json")
    assert resp.status_code == 202
    assert_current(resp)


@pytest.mark.parametrize(("column", "deprecated"), [("phone", True), ("to", False)])
def test_a_campaign_csv_with_a_phone_column_is_answered_with_the_headers(api, settings, column, deprecated):
    upload = SimpleUploadedFile("list.csv", f"{column},first_name\n+14155550123,Ann\n".encode(), "text/csv")
    resp = api.post("/v1/campaigns", {"template": TEMPLATE, "recipients": upload}, format="multipart")
    assert resp.status_code == 202, resp.content
    if deprecated:
        assert_deprecated(resp, settings)
    else:
        assert_current(resp)


def test_suppressions_answer_number_with_the_headers_and_to_without(api, settings):
    added = api.post("/v1/suppressions", {"number": "+14155550140"}, format="json")
    assert added.status_code == 201
    assert_deprecated(added, settings)
    again = api.post("/v1/suppressions", {"to": "+14155550140"}, format="json")
    assert again.status_code == 200
    assert_current(again)

    listed = api.get("/v1/suppressions", {"number": "+14155550140"})
    assert listed.status_code == 200 and len(listed.json()["results"]) == 1
    assert_deprecated(listed, settings)
    assert_current(api.get("/v1/suppressions", {"to": "+14155550140"}))
    # The answers still carry `number` beside `to`: reading it is not a request that used it.
    assert_current(api.get("/v1/suppressions"))

    removed = api.delete("/v1/suppressions?number=%2B14155550140")
    assert removed.status_code == 204
    assert_deprecated(removed, settings)
    api.post("/v1/suppressions", {"to": "+14155550141"}, format="json")
    removed = api.delete("/v1/suppressions?to=%2B14155550141")
    assert removed.status_code == 204
    assert_current(removed)
