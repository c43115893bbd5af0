"""What a client generator reads in the served schema, beyond what the contract walk checks: each operation
has a description of its own and a success example, each path parameter a description, a pattern the
code's own ids fit and an example, the headers every answer carries are declared, the enums are the code's
own lists, and `servers` and the tags are described. tests/smsgw/http/test_openapi_contract.py checks that
every header a real answer carries is declared; `spectacular --fail-on-warn` (deploy/test.sh) fails on the
first three too."""

from __future__ import annotations

import io
import re

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.smsgw.http.test_openapi_contract import METHODS, served_schema


@pytest.fixture(scope="module")
def spec():
    return served_schema()  # served without a key and without the database


def operations(spec: dict):
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method in METHODS:
                yield f"{method.upper()} {path}", path, op


def test_every_operation_has_a_description_of_its_own(spec):
    for where, _, op in operations(spec):
        lead = op.get("description", "").split("Requires the scope")[0].strip()
        assert len(lead) > 40, (where, lead)


def test_every_json_success_answer_has_an_example(spec):
    for where, _, op in operations(spec):
        successes = {code: r for code, r in op["responses"].items() if code.startswith("2")}
        assert successes, where
        for code, response in successes.items():
            media = (response.get("content") or {}).get("application/json")
            if media is not None:
                assert media.get("examples"), (where, code)


def test_every_path_parameter_has_a_description_a_pattern_and_a_fitting_example(spec):
    seen = set()
    for where, _, op in operations(spec):
        for parameter in (p for p in op.get("parameters", []) if p["in"] == "path"):
            seen.add(parameter["name"])
            assert parameter.get("description"), (where, parameter)
            pattern = parameter["schema"]["pattern"]
            assert re.search(pattern, parameter["example"]), (where, parameter)
    assert seen == {"public_id", "sender", "to", "webhook_id"}


def test_the_public_id_patterns_fit_the_ids_the_code_makes(spec):
    from inbound.models import new_inbound_id
    from retention.models import new_export_id
    from scheduling.campaigns.models import new_campaign_id
    from scheduling.models import new_public_id, new_schedule_id

    made = {
        "/v1/messages/{public_id}": new_public_id(),
        "/v1/schedules/{public_id}": new_schedule_id(),
        "/v1/campaigns/{public_id}": new_campaign_id(),
        "/v1/exports/{public_id}": new_export_id(),
        "/v1/inbound/{public_id}": new_inbound_id(),
    }
    for path, made_id in made.items():
        [parameter] = [p for p in spec["paths"][path]["get"]["parameters"] if p["name"] == "public_id"]
        assert re.search(parameter["schema"]["pattern"], made_id), (path, made_id)
        other = next(i for p, i in made.items() if p != path)
        assert not re.search(parameter["schema"]["pattern"], other), (path, other)


def test_the_headers_every_answer_carries_are_declared(spec):
    for where, _, op in operations(spec):
        for code, response in op["responses"].items():
            assert "Request-Id" in response.get("headers", {}), (where, code)
        assert "WWW-Authenticate" in op["responses"]["401"]["headers"], where
        for code in ("200", "429"):
            if code in op["responses"]:
                assert "RateLimit-Remaining" in op["responses"][code]["headers"], (where, code)
    replayable = {("/v1/messages", "201"), ("/v1/campaigns", "202"), ("/v1/schedules", "201")}
    for path, created in replayable:
        responses = spec["paths"][path]["post"]["responses"]
        assert "Location" in responses[created]["headers"], path
    for path in ("/v1/messages", "/v1/campaigns", "/v1/schedules"):
        assert "Idempotent-Replayed" in spec["paths"][path]["post"]["responses"]["200"]["headers"], path
    for path, method in (
        ("/v1/campaigns", "post"),
        ("/v1/suppressions", "get"),
        ("/v1/suppressions", "post"),
        ("/v1/suppressions", "delete"),
    ):
        # On the answers to a request that used a deprecated name (smsgw.http.deprecation): its successes.
        for code, response in spec["paths"][path][method]["responses"].items():
            if code.startswith("2"):
                assert {"Deprecation", "Sunset", "Link"} <= set(response["headers"]), (path, method, code)


def test_the_enums_are_the_codes_own_lists(spec):
    from inbound.models import KeywordAction
    from receipts.models import WebhookStatus
    from scheduling.campaigns.models import CampaignStatus
    from scheduling.lifecycle.kinds import EventKind
    from scheduling.lifecycle.reasons import ReasonCode
    from scheduling.models import Priority, ScheduleStatus, Status

    schemas = spec["components"]["schemas"]
    for name, choices in {
        "MessageStatus": Status,
        "ReasonCode": ReasonCode,
        "EventKind": EventKind,
        "ScheduleStatus": ScheduleStatus,
        "CampaignStatus": CampaignStatus,
        "Priority": Priority,
        "KeywordAction": KeywordAction,
        "WebhookDeliveryStatus": WebhookStatus,
        "ConversationStatus": [*Status.values, "received"],
    }.items():
        assert schemas[name]["enum"] == list(getattr(choices, "values", choices)), name
    message = schemas["MessageOutput"]["properties"]
    assert "#/components/schemas/MessageStatus" in str(message["status"])
    kind = schemas["EventOutput"]["properties"]["kind"]
    assert "EventKind" in str(kind)
    assert "ReasonCode" in str(message["reason_code"]) and "BlankEnum" in str(message["reason_code"])


def test_servers_and_every_tag_are_described(spec):
    assert [s["url"] for s in spec["servers"]] == ["http://localhost:8000", "{scheme}://{host}"]
    described = [t["name"] for t in spec["tags"]]
    assert all(t.get("description") for t in spec["tags"])
    used = {tag for _, _, op in operations(spec) for tag in op["tags"]}
    assert used <= set(described), used - set(described)
    assert described[:3] == ["messages", "schedules", "campaigns"]


def test_the_schema_generates_without_a_warning():
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null", stderr=out)
    assert settings.SPECTACULAR_SETTINGS["OAS_VERSION"] == "3.1.0"
