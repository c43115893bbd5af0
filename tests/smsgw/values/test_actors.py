"""What a tenant is shown of who acted (smsgw.values.actors): its own keys and the recipient as they are,
any staff member as "operator", everything else as "system"; no operator's or host's name in texts."""

from __future__ import annotations

import pytest

from smsgw.values.actors import actor_for_tenant, details_for_tenant, reason_for_tenant


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("apikey:sk_ab12cd34", "apikey:sk_ab12cd34"),
        ("recipient", "recipient"),
        ("admin:alice", "operator"),
        ("admin:root@example.com", "operator"),
        ("system", "system"),
        ("system:materializer", "system"),
        ("system:campaign", "system"),
        ("probe", "system"),
        ("provider:twilio", "system"),
        ("web-3.internal", "system"),
        ("", "system"),
        (None, "system"),
    ],
)
def test_actors_as_a_tenant_sees_them(stored, shown):
    assert actor_for_tenant(stored) == shown


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("paused by admin:alice", "paused by operator"),
        ("paused by apikey:sk_ab12cd34", "paused by apikey:sk_ab12cd34"),
        (
            "this host (worker-7.dc2.internal) cannot reach the provider; waiting",
            "this host cannot reach the provider; waiting",
        ),
        ("released by an operator after review", "released by an operator after review"),
        ("", ""),
    ],
)
def test_reasons_lose_operator_and_host_names(stored, shown):
    assert reason_for_tenant(stored) == shown


def test_details_lose_the_host_and_their_texts_are_scrubbed():
    stored = {"host": "worker-7", "handed_over": True, "previous_reason": "this host (worker-7) cannot reach"}
    assert details_for_tenant(stored) == {"handed_over": True, "previous_reason": "this host cannot reach"}
