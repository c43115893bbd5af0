"""API request rate and latency (smsgw.http.request_metrics): labelled by the URL pattern, never the path, so
a scan of ids adds no series; by method and status class; a 500 counted like any answer."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory

from smsgw.http.request_metrics import route_of
from tests.metrics import TOKEN, scrape, value

pytestmark = pytest.mark.django_db

COUNT = "smsgw_http_request_duration_seconds_count"


@pytest.fixture(autouse=True)
def _token(settings):
    settings.METRICS_TOKEN = TOKEN


def test_requests_are_counted_by_route_pattern_method_and_status_class(api):
    detail = "v1/messages/<str:public_id>"
    before = scrape()
    assert api.get("/v1/messages").status_code == 200
    for i in range(5):  # five ids, one series
        assert api.get(f"/v1/messages/msg_{i:024d}").status_code == 404
    assert api.delete("/v1/messages").status_code == 405
    assert Client().get("/no/such/path/0123").status_code == 404
    assert Client().get("/admin/scheduling/message/17/change/").status_code == 302  # to the login
    after = scrape()

    def delta(**labels):
        return value(after, COUNT, **labels) - value(before, COUNT, **labels)

    assert delta(route="v1/messages", method="GET", status_class="2xx") == 1
    assert delta(route=detail, method="GET", status_class="4xx") == 5
    assert delta(route="v1/messages", method="DELETE", status_class="4xx") == 1
    assert delta(route="unmatched", method="GET", status_class="4xx") == 1
    assert delta(route="admin/", method="GET", status_class="3xx") == 1
    routes = {dict(labels).get("route") for (name, labels) in after if name == COUNT}
    assert not any("msg_" in r or "/17/" in r for r in routes if r), routes  # no raw path is a label
    bucket = value(
        after,
        "smsgw_http_request_duration_seconds_bucket",
        route=detail,
        method="GET",
        status_class="4xx",
        le="+Inf",
    )
    assert (
        bucket
        - value(
            before,
            "smsgw_http_request_duration_seconds_bucket",
            route=detail,
            method="GET",
            status_class="4xx",
            le="+Inf",
        )
        == 5
    )


def test_a_server_error_and_a_callback_are_timed_too(settings):
    settings.ROOT_URLCONF = "tests.smsgw.http.failing_urls"
    before = scrape()
    client = Client(raise_request_exception=False)
    assert client.post("/v1/_test/boom", {}).status_code == 500
    assert client.post("/receipts/_test/boom/", {}).status_code == 500
    after = scrape()
    for route in ("v1/_test/boom", "receipts/_test/boom/"):
        labels = {"route": route, "method": "POST", "status_class": "5xx"}
        assert value(after, COUNT, **labels) - value(before, COUNT, **labels) == 1, route


def test_an_odd_method_is_one_label_and_an_unresolved_request_still_has_its_route(api):
    def others(samples) -> float:
        return sum(
            v
            for (name, labels), v in samples.items()
            if name == COUNT
            and dict(labels).get("method") == "other"
            and dict(labels)["route"] == "v1/messages"
        )

    before = scrape()
    assert api.generic("PROPFIND", "/v1/messages").status_code >= 400
    assert others(scrape()) - others(before) == 1
    # An early refusal never reached the resolver: its route is resolved from the path.
    assert route_of(RequestFactory().get("/v1/messages/msg_x")) == "v1/messages/<str:public_id>"
