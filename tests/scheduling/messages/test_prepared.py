"""A single create's three statements (the key and its tenant, the suppression check, the message and its
event) are prepared statements on PostgreSQL, once per connection (smsgw.runtime.db.fetchone_prepared),
and each still answers as before: a wrong or revoked key is refused, a suppressed recipient is a 400
naming ``to``, an idempotent retry gets the stored message."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.guards import suppression
from scheduling.models import Message
from smsgw.models import ApiKey
from tests.factories import recipient
from tests.plans import prepared_statements as prepared

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="server-side prepared statements"),
]


def test_a_create_runs_three_prepared_statements_once_each_and_answers_as_before(api, tenant_and_key):
    tenant, raw_key = tenant_and_key
    suppression.suppression_add(tenant_id=tenant.pk, number=recipient(9), source="api", actor="test")

    made = [
        api.post("/v1/messages", {"to": recipient(i), "body": f"hi {i}"}, format="json") for i in range(3)
    ]
    refused = api.post("/v1/messages", {"to": recipient(9), "body": "no"}, format="json")
    first = api.post(
        "/v1/messages", {"to": recipient(4), "body": "once"}, format="json", HTTP_IDEMPOTENCY_KEY="p-1"
    )
    again = api.post(
        "/v1/messages", {"to": recipient(4), "body": "once"}, format="json", HTTP_IDEMPOTENCY_KEY="p-1"
    )

    assert [r.status_code for r in made] == [201, 201, 201]
    assert refused.status_code == 400 and "to" in refused.json()["error"]["fields"]
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert (
        Message.objects.filter(tenant=tenant).count() == 4
    )  # 3 + the idempotent one, nothing for the refused

    assert len(prepared("SELECT %smsgw_apikey%")) == 1
    assert len(prepared("SELECT 1 FROM %suppression%")) == 1
    # One statement per set of columns given: the three plain creates share one, the idempotent pair the
    # other (it also gives the key's column).
    inserts = prepared("%INSERT INTO %scheduling_message%")
    assert len(inserts) == 2 and all("ON CONFLICT" in sql for sql in inserts)
    assert sum("idempotency_key" in sql for sql in inserts) == 1

    # Prepared, the key lookup still reads the key's state on every request: revoked, it is refused.
    ApiKey.objects.filter(tenant=tenant).update(revoked_at=timezone.now())
    assert api.post("/v1/messages", {"to": recipient(5), "body": "late"}, format="json").status_code == 401
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key[:-2]}xx")
    assert wrong.post("/v1/messages", {"to": recipient(6), "body": "x"}, format="json").status_code == 401
    assert Message.objects.filter(tenant=tenant).count() == 4
