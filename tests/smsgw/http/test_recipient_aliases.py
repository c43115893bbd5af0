"""The recipient is `to` in every request and answer of the served schema; the old names (`phone` in a
campaign's recipients and error rows, `number` in the suppression list) are still there, each marked
`deprecated: true` and described as an alias of `to`."""

from __future__ import annotations

import pytest

from tests.smsgw.http.test_openapi_contract import served_schema

ALIAS = "Deprecated alias of `to`"


@pytest.fixture(scope="module")
def spec():
    return served_schema()  # served without a key and without the database


def component(spec: dict, name: str) -> dict:
    return spec["components"]["schemas"][name]


def assert_alias(properties: dict, alias: str) -> None:
    assert properties[alias]["deprecated"] is True
    assert properties[alias]["description"].startswith(ALIAS), properties[alias]
    assert "deprecated" not in properties["to"]


def test_campaign_recipient_objects_name_to_and_mark_phone_deprecated(spec):
    item = component(spec, "CampaignCreateInput")["properties"]["recipients"]["items"]
    assert_alias(item["properties"], "phone")
    # Every other key is a variable: still any name, a string, a number or null.
    assert item["additionalProperties"]["type"] == ["string", "number", "null"]
    upload = component(spec, "CampaignUploadInput")["properties"]["recipients"]["description"]
    assert "header row first: to," in upload and "`phone` column is a deprecated alias of `to`" in upload


def test_campaign_error_rows_answer_to_and_the_deprecated_phone(spec):
    errors = component(spec, "CampaignErrorOutput")
    assert_alias(errors["properties"], "phone")
    assert {"to", "phone"} <= set(errors["required"])


@pytest.mark.parametrize("name", ["SuppressionInput", "SuppressionOutput"])
def test_suppression_bodies_name_to_and_mark_number_deprecated(spec, name):
    assert_alias(component(spec, name)["properties"], "number")


def test_suppression_answers_carry_both_keys(spec):
    assert {"to", "number"} <= set(component(spec, "SuppressionOutput")["required"])


@pytest.mark.parametrize("method", ["get", "delete"])
def test_suppression_query_parameters_name_to_and_mark_number_deprecated(spec, method):
    params = {p["name"]: p for p in spec["paths"]["/v1/suppressions"][method]["parameters"]}
    assert params["number"]["deprecated"] is True and params["number"]["description"].startswith(ALIAS)
    assert "deprecated" not in params["to"]
    # Neither is required alone: one of the two is (a 400 naming `to` when both are absent).
    assert not params["to"].get("required") and not params["number"].get("required")
