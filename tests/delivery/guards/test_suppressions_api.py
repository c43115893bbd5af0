"""`/v1/suppressions` names the recipient `to`, as every request of the API does; `number` is its deprecated
alias, still read in the body and the query and still written beside `to` in every answer (the tests in
test_suppression.py use `number` and prove the alias). Both with different numbers is a 400 naming
`number`; a bad value is a 400 naming the field the client wrote."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from delivery.models import Suppression
from tests.factories import SENDER, recipient, tenant_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    _, key = tenant_with_key("acme")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def add(api, **body):
    return api.post("/v1/suppressions", body, format="json")


def fields_of(resp) -> dict:
    return resp.json()["error"]["fields"]


def test_add_with_to_answers_both_keys_with_the_same_value(api):
    resp = add(api, to="+1 415 200 0011", sender=SENDER)
    assert resp.status_code == 201, resp.content
    assert resp.json()["to"] == resp.json()["number"] == recipient(11)
    assert add(api, to=recipient(11), sender=SENDER).status_code == 200
    # The alias names the same entry.
    assert add(api, number=recipient(11), sender=SENDER).status_code == 200
    assert Suppression.objects.count() == 1


@pytest.mark.parametrize(
    "body",
    [
        {"to": recipient(12), "number": recipient(12)},
        {"to": "+1 415 200 0012", "number": recipient(12)},  # the same number, written differently
    ],
)
def test_to_and_number_naming_the_same_number_is_fine(api, body):
    resp = add(api, **body)
    assert resp.status_code == 201, resp.content
    assert resp.json()["to"] == resp.json()["number"] == recipient(12)


def test_to_and_number_naming_different_numbers_is_400_naming_number(api):
    resp = add(api, to=recipient(13), number=recipient(14))
    assert resp.status_code == 400 and list(fields_of(resp)) == ["number"], resp.content
    assert not Suppression.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"to": "nope"}, "to"),
        ({"number": "nope"}, "number"),
        ({"to": 14155550123}, "to"),
        ({}, "to"),
        ({"sender": SENDER}, "to"),
    ],
)
def test_a_bad_or_missing_recipient_is_400_naming_the_field_written(api, body, field):
    resp = add(api, **body)
    assert resp.status_code == 400 and field in fields_of(resp), resp.content
    assert not Suppression.objects.exists()


def test_list_filters_by_to_or_number_and_answers_both_keys(api):
    add(api, to=recipient(15))
    add(api, to=recipient(16))
    for param in ("to", "number"):
        page = api.get("/v1/suppressions", {param: recipient(15)}).json()["results"]
        assert [(e["to"], e["number"]) for e in page] == [(recipient(15), recipient(15))]
    both = api.get("/v1/suppressions", {"to": recipient(15), "number": recipient(15)})
    assert [e["to"] for e in both.json()["results"]] == [recipient(15)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"to": recipient(15), "number": recipient(16)}, "number"),
        ({"to": "nope"}, "to"),
        ({"number": "nope"}, "number"),
    ],
)
def test_list_with_a_bad_or_conflicting_filter_is_400_naming_it(api, params, field):
    resp = api.get("/v1/suppressions", params)
    assert resp.status_code == 400 and list(fields_of(resp)) == [field], resp.content


def test_delete_with_to_removes_the_entry(api):
    add(api, to=recipient(17), sender=SENDER)
    assert api.delete(f"/v1/suppressions?to=%2B{recipient(17)[1:]}").status_code == 404  # other sender
    assert api.delete(f"/v1/suppressions?to=%2B{recipient(17)[1:]}&sender=%2B{SENDER[1:]}").status_code == 204
    assert not Suppression.objects.exists()


def test_delete_without_a_recipient_or_with_two_is_400(api):
    add(api, to=recipient(18))
    missing = api.delete("/v1/suppressions")
    assert missing.status_code == 400 and list(fields_of(missing)) == ["to"]
    both = api.delete(f"/v1/suppressions?to=%2B{recipient(18)[1:]}&number=%2B{recipient(19)[1:]}")
    assert both.status_code == 400 and list(fields_of(both)) == ["number"]
    assert Suppression.objects.count() == 1
