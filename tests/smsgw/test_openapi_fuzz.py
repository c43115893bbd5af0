"""Schemathesis against the served schema, in process (WSGI), authenticated as a tenant, every check
enabled, positive and negative data: no response may be a 500 or differ from what the schema documents
(status, content type, headers, body), and bad input must be refused. Bounded: a fixed number of examples
per operation and a fixed seed, so a run is the same run every time and takes well under two minutes."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from tests.factories import tenant_with_key

# Per operation and generation mode; 26 operations x 2 modes.
MAX_EXAMPLES = 50
SEED = 20261201

CONFIG = {
    "seed": SEED,
    "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "allow-x00": True},
    "checks": {
        "enabled": True,
        # The schema cannot say which strings are valid phone numbers (libphonenumber), IANA zones or
        # RRULEs, so a request that fits the schema may still be refused for its content: 400 naming the
        # field (and 409/422 for state) is acceptance of the contract, not a failure of it.
        "positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "409", "422"]},
    },
}


@pytest.fixture(autouse=True)
def _requests_inside_the_test_transaction(db):
    """The WSGI app runs in this process; as with Django's test client, a request must not close the
    connection that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_key(db):
    return tenant_with_key("fuzz")[1]


# Loaded when the module is collected (schemathesis' lazy fixture loader does not run on pytest 9): the
# schema is served without a key and without the database.
schema = schemathesis.openapi.from_wsgi(
    "/v1/openapi.json", WSGIHandler(), config=SchemathesisConfig.from_dict(CONFIG)
)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
def test_no_input_breaks_the_contract(case, fuzz_key):
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_key}"})
