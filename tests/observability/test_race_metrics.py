"""Cancellation races and claim failures (SPEC section 9), counted where the code decides them and read back
from the real /metrics endpoint. The send worker's side (a send that found its message cancelled, a send
claim that raised) is in tests/delivery/sending/test_send_metrics.py."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from scheduling.dispatch import release, sweep
from scheduling.lifecycle import transitions
from scheduling.messages import service as services
from scheduling.models import Message, Status
from smsgw.domain_errors import ConflictError
from tests.factories import message, recipient, tenant_with_key
from tests.metrics import TOKEN, scrape, value

pytestmark = pytest.mark.django_db

RACES = "smsgw_cancellation_races_total"


@pytest.fixture
def tenant(db, settings):
    settings.METRICS_TOKEN = TOKEN
    return tenant_with_key("acme")[0]


def moved(msg, *path: str) -> None:
    for src, dst in zip((Status.SCHEDULED, *path), path, strict=False):
        transitions.transition(msg.pk, from_statuses=[src], to_status=dst, kind=dst)


def test_a_cancel_that_loses_to_a_send_counts_a_race_and_a_late_cancel_does_not(tenant, client):
    in_flight, long_done = message(tenant, to=recipient(1)), message(tenant, to=recipient(2))
    moved(in_flight, Status.QUEUED, Status.SENDING)  # a send task holds it right now
    moved(long_done, Status.QUEUED, Status.SENDING, Status.SENT)
    before = value(scrape(client), RACES, side="cancel_lost")
    for msg in (in_flight, long_done):
        with pytest.raises(ConflictError):
            services.message_cancel(tenant=tenant, public_id=msg.public_id, actor="key:t")
    assert value(scrape(client), RACES, side="cancel_lost") - before == 1
    assert Message.objects.get(pk=in_flight.pk).status == Status.SENDING


def test_a_cancel_whose_message_was_claimed_after_it_was_read_counts_a_race(tenant, client, monkeypatch):
    msg = message(tenant, to=recipient(3))
    moved(msg, Status.QUEUED)
    real_transition = transitions.transition

    def send_claims_first(*args, **kwargs):
        # A send claims and submits it between the cancel's read (queued) and its compare-and-set.
        Message.objects.filter(pk=msg.pk).update(status=Status.SENT)
        return real_transition(*args, **kwargs)

    monkeypatch.setattr(services.transitions, "transition", send_claims_first)
    before = value(scrape(client), RACES, side="cancel_lost")
    with pytest.raises(ConflictError):
        services.message_cancel(tenant=tenant, public_id=msg.public_id, actor="key:t")
    assert value(scrape(client), RACES, side="cancel_lost") - before == 1


def test_a_sweep_pass_that_raises_counts_a_claim_failure(tenant, client, monkeypatch):
    def refuse(**_kwargs):
        raise OperationalError("canceling statement due to lock timeout")

    monkeypatch.setattr(release, "due_release", refuse)
    labels = {"stage": "sweep", "error": "OperationalError"}
    before = value(scrape(client), "smsgw_claim_failures_total", **labels)
    with pytest.raises(OperationalError):
        sweep.sweep_for(0.0)
    assert value(scrape(client), "smsgw_claim_failures_total", **labels) - before == 1
