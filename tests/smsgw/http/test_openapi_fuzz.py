"""Schemathesis against the served schema, in process (WSGI), authenticated as a tenant, every check
enabled, positive and negative data: no response may be a 500 or differ from what the schema documents
(status, content type, headers, body), and bad input must be refused. Bounded: a fixed number of examples
per operation and a fixed seed, so a run is the same run every time and takes well under two minutes. The
long tier (``--long``) fuzzes every operation again with five times the examples."""

from __future__ import annotations

import re
import zlib
from datetime import timedelta

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings
from rest_framework.test import APIClient
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import negative_data_rejection

from tests.factories import RECIPIENT, tenant_with_key

# Per operation and generation mode. 50 when there were 27 operations; 30 for the 47 of today keeps the
# run's total (about 1,400 examples a mode) and its time where the module's docstring says. The long tier
# runs LONG_EXAMPLES.
MAX_EXAMPLES = 30
LONG_EXAMPLES = 5 * MAX_EXAMPLES
SEED = 20261201


def _config(max_examples: int) -> dict:
    return {
        "seed": SEED,
        "generation": {"max-examples": max_examples, "deterministic": True, "allow-x00": True},
        "checks": {
            "enabled": True,
            # The schema cannot say which strings are valid phone numbers (libphonenumber), IANA zones or
            # RRULEs, so a request that fits the schema may still be refused for its content: 400 naming the
            # field (and 409/422 for state) is acceptance of the contract, not a failure of it.
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "422"]
            },
        },
        # No per-operation "operations" entry here: with one, schemathesis 4.32 ignores the schema's
        # include() filters, and every group fuzzed all 47 operations (five times the work).
        # test_each_group_fuzzes_only_its_own_operations keeps it so.
    }


# A batch answers each item on its own (200 with each item's 4xx in `results`): an invalid item is
# refused inside the answer, not by its status, so negative_data_rejection does not apply to it. What
# refuses the request as a whole (not a list, too many items) and every item's refusal are checked in
# tests/scheduling/messages/test_batch.py.
PER_ITEM_ANSWERS = {("POST", "/v1/messages/batch")}


@pytest.fixture
def tenant_objects(db):
    """A key and real objects for the ids in paths: with random ids every such operation would only
    ever answer 404, and its body and query would never be read."""
    _, key = tenant_with_key("fuzz")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    later = (timezone.now() + timedelta(days=1)).isoformat()
    msg = api.post("/v1/messages", {"to": RECIPIENT, "body": "fuzz", "send_at": later}, format="json")
    sch = api.post(
        "/v1/schedules",
        {
            "to": RECIPIENT,
            "body": "fuzz",
            "rrule": "FREQ=DAILY",
            "start": "2030-01-01T09:00:00",
            "timezone": "UTC",
        },
        format="json",
    )
    assert msg.status_code == sch.status_code == 201
    # The WSGI app runs in this process: as in Django's test client, a request must not close the
    # connection that holds the test's transaction.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield key, {"/v1/messages/": msg.json()["id"], "/v1/schedules/": sch.json()["id"]}
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# Loaded when the module is collected (schemathesis' lazy fixture loader does not run on pytest 9): the
# schema is served without a key and without the database.
schema = schemathesis.openapi.from_wsgi(
    "/v1/openapi.json", WSGIHandler(), config=SchemathesisConfig.from_dict(_config(MAX_EXAMPLES))
)
long_schema = schemathesis.openapi.from_wsgi(
    "/v1/openapi.json", WSGIHandler(), config=SchemathesisConfig.from_dict(_config(LONG_EXAMPLES))
)


# The operations in groups, one test function each (its cases are items of their own, spread over the
# parallel run's workers; tests/durations.json times each group). Every operation is in exactly one
# group: test_every_operation_is_fuzzed_in_one_group fails for a new path that none names, so none is
# left out of the fuzzing.
GROUPS = {
    "messages": r"^/v1/(messages|recipients)(/|$)",
    "schedules": r"^/v1/schedules(/|$)",
    "campaigns": r"^/v1/campaigns(/|$)",
    "limits": r"^/v1/(capacity|exports|quiet-hours|suppressions)(/|$)",
    "settings": r"^/v1/(webhook|webhook-deliveries|retention|routes|inbound|conversations|keywords)(/|$)",
}
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)


def _no_input_breaks_the_contract(case, tenant_objects) -> None:
    key, ids = tenant_objects
    # Valid data aims at the tenant's real objects (half of the time, so unknown ids are tried too);
    # invalid data keeps what was generated, which may be the id itself.
    if case.meta.generation.mode.is_positive and "public_id" in (case.path_parameters or {}):
        for prefix, real in ids.items():
            if (
                case.operation.path.startswith(prefix)
                and zlib.crc32(str(case.path_parameters["public_id"]).encode()) % 2
            ):
                case.path_parameters["public_id"] = real
    excluded = (
        [negative_data_rejection]
        if (case.operation.method.upper(), case.operation.path) in PER_ITEM_ANSWERS
        else None
    )
    case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, excluded_checks=excluded)


@schema.include(path_regex=GROUPS["messages"]).parametrize()
@FUZZ
def test_no_input_breaks_the_messages_contract(case, tenant_objects):
    _no_input_breaks_the_contract(case, tenant_objects)


@schema.include(path_regex=GROUPS["schedules"]).parametrize()
@FUZZ
def test_no_input_breaks_the_schedules_contract(case, tenant_objects):
    _no_input_breaks_the_contract(case, tenant_objects)


@schema.include(path_regex=GROUPS["campaigns"]).parametrize()
@FUZZ
def test_no_input_breaks_the_campaigns_contract(case, tenant_objects):
    _no_input_breaks_the_contract(case, tenant_objects)


@schema.include(path_regex=GROUPS["limits"]).parametrize()
@FUZZ
def test_no_input_breaks_the_limits_contract(case, tenant_objects):
    _no_input_breaks_the_contract(case, tenant_objects)


@schema.include(path_regex=GROUPS["settings"]).parametrize()
@FUZZ
def test_no_input_breaks_the_settings_contract(case, tenant_objects):
    _no_input_breaks_the_contract(case, tenant_objects)


@pytest.mark.long
@pytest.mark.timeout(3600)
@long_schema.parametrize()
@FUZZ
def test_long_no_input_breaks_any_contract(case, tenant_objects):
    """The production-scale version of the groups above: every operation, LONG_EXAMPLES examples per
    operation and mode (five times every run's)."""
    _no_input_breaks_the_contract(case, tenant_objects)


def _labels(fuzzed) -> list[str]:
    return [result.ok().label for result in fuzzed.get_all_operations()]


def test_every_operation_is_fuzzed_in_one_group():
    paths = list(schema.raw_schema["paths"])
    assert len(paths) > 20
    for path in paths:
        matched = [name for name, pattern in GROUPS.items() if re.search(pattern, path)]
        assert len(matched) == 1, f"{path} is in {matched or 'no'} fuzz group: add it to GROUPS"


def test_each_group_fuzzes_only_its_own_operations():
    """The groups split the work: together they fuzz each operation exactly once (a filter that selects
    nothing, as a per-operation config entry once made it, would fuzz every operation in every group)."""
    every = _labels(schema)
    assert len(every) > 40
    grouped = [label for pattern in GROUPS.values() for label in _labels(schema.include(path_regex=pattern))]
    assert sorted(grouped) == sorted(every)
    assert sorted(_labels(long_schema)) == sorted(every)
    assert {label.split(" ", 1)[1] for label in every} >= {path for _, path in PER_ITEM_ANSWERS}
