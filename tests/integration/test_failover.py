"""Routing and failover with real processes: a celery worker and beat on PostgreSQL and the broker, the
Twilio and the Vonage sandboxes as real servers behind the real adapters. Each test states the final state
of every message and counts the copies at both providers."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.models import Attempt, AttemptOutcome, DuplicateSubmission, ProviderCircuit
from delivery.providers.vonage.sandbox.process import VonageSandboxProcess
from scheduling.models import Message, MessageEvent, Status
from smsgw.config import routes as route_config
from tests.factories import messages_bulk, sender_for, tenant_with_key
from tests.harness import start_web

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

VONAGE_SENDER = "ACME"
SIGNATURE_SECRET = "failover-test-signature-secret"
ROUTES = [
    {"name": "gb", "country": "GB", "legs": [{"provider": "vonage", "sender": VONAGE_SENDER}]},
    {
        "name": "us",
        "country": "US",
        "legs": [{"provider": "twilio"}, {"provider": "vonage", "sender": VONAGE_SENDER, "weight": 0}],
    },
]
SENT_OR_DELIVERED = (Status.SENT, Status.DELIVERED)
FINAL = (Status.SENT, Status.DELIVERED, Status.UNDELIVERED, Status.FAILED, Status.EXPIRED, Status.CANCELLED)


@pytest.fixture
def two_providers(pipeline, settings):
    """The pipeline with the Vonage sandbox beside Twilio's, and the routes above in every process."""
    with VonageSandboxProcess() as vonage:
        # Vonage can be asked nothing about a submission whose answer was lost: only its signed receipt,
        # carrying our client-ref, settles it (docs/vonage.md). So the gateway's web process takes them.
        vonage.config(signature_secret=SIGNATURE_SECRET)
        env = {
            "VONAGE_API_KEY": vonage.api_key,
            "VONAGE_API_SECRET": vonage.api_secret,
            "VONAGE_REST_HOST": vonage.rest_host,
            "VONAGE_CA_BUNDLE": vonage.ca_file,
            "VONAGE_SIGNATURE_SECRET": SIGNATURE_SECRET,
            "SMSGW_ROUTES": json.dumps(ROUTES),
            # Timeouts well above a loaded machine's latency: the uncertain answers are the injected ones.
            "TWILIO_TIMEOUT_SECONDS": "8",
            "VONAGE_TIMEOUT_SECONDS": "8",
            "SMSGW_SENDING_LEASE_SECONDS": "12",
        }
        pipeline.env.update(env)
        start_web(pipeline)
        settings.SMSGW_ROUTES = route_config.parse(
            env["SMSGW_ROUTES"], ["twilio", "vonage"], ["transactional", "bulk"]
        )
        pipeline.vonage = vonage
        yield pipeline


def us_plan(tenant) -> list[dict]:
    return [
        {"provider": "twilio", "account": "", "from": tenant.default_from, "pool": ""},
        {"provider": "vonage", "account": "", "from": VONAGE_SENDER, "pool": ""},
    ]


def routed_bulk(tenant, n: int, **kw) -> list[int]:
    """n US messages on the US route's first leg (as birth routes them: tests/delivery/routing covers that
    path; this one makes thousands quickly)."""
    before = set(Message.objects.filter(tenant=tenant).values_list("pk", flat=True))
    pks = [
        pk
        for pk in messages_bulk(tenant, n, due_at=kw.pop("due_at", timezone.now()), **kw)
        if pk not in before
    ]
    Message.objects.filter(pk__in=pks).update(route="settings:us", route_plan=us_plan(tenant), route_leg=0)
    return pks


def vonage_copies(pipeline) -> Counter:
    return Counter("+" + m["to"].removeprefix("+") for m in pipeline.vonage.messages())


def twilio_copies(pipeline) -> Counter:
    return Counter(m["to"] for m in pipeline.sandbox.messages_json())


def once_across_both(pipeline, pks) -> tuple[Counter, Counter]:
    """Every message sent or delivered, held exactly once across both providers, by the provider its last
    attempt went to, under the id it records. Returns the copies (twilio, vonage)."""
    twilio, vonage = twilio_copies(pipeline), vonage_copies(pipeline)
    msgs = list(Message.objects.filter(pk__in=pks))
    not_sent = [(m.pk, m.status, m.reason_code) for m in msgs if m.status not in SENT_OR_DELIVERED]
    assert not not_sent, f"{len(not_sent)} not sent: {not_sent[:10]}"
    twice = [(m.to, twilio[m.to], vonage[m.to]) for m in msgs if twilio[m.to] + vonage[m.to] != 1]
    assert not twice, f"{len(twice)} recipients not held exactly once across both providers: {twice[:10]}"
    wrong = [(m.pk, m.provider) for m in msgs if (twilio if m.provider == "twilio" else vonage)[m.to] != 1]
    assert not wrong, f"{len(wrong)} messages record another provider than the one holding them: {wrong[:10]}"
    assert not DuplicateSubmission.objects.filter(message_id__in=pks).exists()
    return twilio, vonage


def test_us_numbers_go_to_twilio_and_gb_numbers_to_vonage_each_once(two_providers):
    pipeline = two_providers
    tenant, key = tenant_with_key("acme", allowed_countries=["US", "GB"])
    sender_for(tenant, VONAGE_SENDER)  # the routes' Vonage legs send from it: it must be the tenant's
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    us = [f"+1415555{i:04d}" for i in range(10)]
    gb = [f"+4474001{i:05d}" for i in range(10)]
    ids = []
    for to in us + gb:
        resp = api.post("/v1/messages", {"to": to, "body": "routed"}, format="json")
        assert resp.status_code == 201, resp.content
        ids.append(resp.json()["id"])
    pks = list(Message.objects.filter(public_id__in=ids).values_list("pk", flat=True))
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_all_final(pks, timeout=90, final=FINAL)

    twilio, vonage = once_across_both(pipeline, pks)
    assert set(twilio) == set(us) and set(vonage) == set(gb)
    for m in Message.objects.filter(pk__in=pks):
        expected = (
            ("vonage", "settings:gb", VONAGE_SENDER)
            if m.to in gb
            else ("twilio", "settings:us", tenant.default_from)
        )
        assert (m.provider, m.route, m.from_number) == expected
        assert [(a.provider, a.outcome) for a in m.attempts.all()] == [(expected[0], AttemptOutcome.ACCEPTED)]
        resp = api.get(f"/v1/messages/{m.public_id}")
        assert resp.json()["route"]["legs"][0]["provider"] == expected[0]
    gb_sender = {m["from"] for m in pipeline.vonage.messages()}
    assert gb_sender == {VONAGE_SENDER}


def _twilio_outage_mid_burst(
    pipeline, n: int, before: int, outage_seconds: float, rate: int | None = None
) -> tuple[object, list[int]]:
    """n routed messages; once ``before`` of them reached Twilio, every Twilio call answers 503 (nothing
    stored) for ``outage_seconds``; then Twilio answers again. ``rate``: the Twilio sender's messages per
    second (unlimited when None), so that, as with 2,000 messages at full speed, most of the burst still
    waits when the outage starts. Returns the tenant and the messages, all final."""
    pipeline.sandbox.config(callbacks_enabled=False)
    pipeline.env.update(SMSGW_CIRCUIT_MIN_FAILURES="5")
    if rate is not None:
        pipeline.env.update(SMSGW_RATE_LONG_CODE=str(rate))
    tenant, _ = tenant_with_key("acme")
    pks = routed_bulk(tenant, n)
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_until(
        lambda: pipeline.sandbox.stats()["submissions"] >= before, 60, f"{before} submissions at Twilio"
    )
    pipeline.sandbox.config(outage="503")
    outage_started = timezone.now()
    pipeline.wait_until(lambda: len(pipeline.vonage.messages()) > 0, 60, "a first Vonage submission")
    first_vonage = timezone.now()
    pipeline.wait_until(
        lambda: (timezone.now() - outage_started).total_seconds() >= outage_seconds,
        outage_seconds + 30,
        f"the end of the {outage_seconds:g} s outage",
    )
    pipeline.sandbox.config(outage="none")
    try:
        pipeline.wait_all_final(pks, timeout=600, final=FINAL)
    except AssertionError:
        print(list(ProviderCircuit.objects.values()))
        raise
    assert (first_vonage - outage_started).total_seconds() < 30
    return tenant, pks


def test_twilio_503_for_12s_mid_burst_fails_over_to_vonage_none_twice_none_failed(two_providers):
    """400 messages, paced at 40/s on the Twilio sender (unpaced, the worker would have every one of them in
    flight at once, where 2,000 keep a backlog waiting); after the first 60 reach Twilio, every Twilio call
    answers 503 for 12 s (nothing stored): longer than the circuit takes to open (5 failures) and than reconciliation takes to prove a
    503'd submission absent (absent grace 3 s, list lag 2 s), so every path of the 2,000-message, 60-s
    long-tier version below is taken. The circuit opens; what waits moves to Vonage at once; the submissions
    answered 503 (uncertain: a 503 may follow a stored message) move only once reconciliation proved them
    absent. Then Twilio recovers, and new messages go to Twilio again (each message starts on its first
    leg). Final state: all sent, each held once across both providers, none failed."""
    _failover_holds(two_providers, *_twilio_outage_mid_burst(two_providers, 400, 60, 12, rate=40))


@pytest.mark.long
@pytest.mark.timeout(900)
def test_long_twilio_503_for_60s_mid_burst_of_2000_fails_over_to_vonage_none_twice_none_failed(two_providers):
    """The production-scale version: 2,000 messages, the outage after 300, for 60 s."""
    _failover_holds(two_providers, *_twilio_outage_mid_burst(two_providers, 2000, 300, 60))


def _failover_holds(pipeline, tenant, pks: list[int]) -> None:
    _, vonage = once_across_both(pipeline, pks)
    assert vonage, "nothing failed over"
    assert Message.objects.filter(pk__in=pks, status=Status.FAILED).count() == 0
    # Every message at Vonage got there by a failover whose reason proves Twilio did not take it.
    moved = MessageEvent.objects.filter(message_id__in=pks, kind="failover")
    whys = Counter(e.details["why"] for e in moved)
    assert set(whys) <= {"circuit_open", "reconciled_absent", "account_fault", "retries_exhausted"}, whys
    assert sum(whys.values()) == sum(vonage.values())
    # An uncertain attempt at Twilio is followed by a failover only after `reconciled_absent`.
    for pk in set(
        Attempt.objects.filter(
            message_id__in=pks, provider="twilio", outcome=AttemptOutcome.RECONCILED_ABSENT
        ).values_list("message_id", flat=True)
    ):
        kinds = list(MessageEvent.objects.filter(message_id=pk).order_by("id").values_list("kind", flat=True))
        assert kinds.index("reconciled_absent") < kinds.index("failover"), kinds

    # After the recovery: the circuit closes on a probe, and new messages are sent by Twilio again.
    after = routed_bulk(tenant, 50, body="after")
    pipeline.wait_all_final(after, timeout=120, final=FINAL)
    providers = Counter(Message.objects.filter(pk__in=after).values_list("provider", flat=True))
    assert providers == {"twilio": 50}, providers


def test_an_uncertain_twilio_submission_moves_only_once_proved_absent(two_providers):
    """One recipient's create hangs and gets no stored copy (uncertain, absent); another's is stored and the
    connection dropped (uncertain, present). The first goes to Vonage only after `reconciled_absent`; the
    second is found at Twilio and never goes to Vonage."""
    pipeline = two_providers
    tenant, _ = tenant_with_key("acme")
    pks = routed_bulk(tenant, 4)
    msgs = {m.pk: m for m in Message.objects.filter(pk__in=pks)}
    absent, present = msgs[pks[0]].to, msgs[pks[1]].to
    pipeline.sandbox.config(
        callbacks_enabled=False,
        rules=[
            {"to": absent, "action": "timeout", "times": 1},
            {"to": present, "action": "store_then_drop", "times": 1},
        ],
    )
    pipeline.env.update(SMSGW_RECONCILE_LIST_LAG_SECONDS="5")
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_all_final(pks, timeout=120, final=FINAL)

    twilio, vonage = once_across_both(pipeline, pks)
    assert vonage == Counter({absent: 1}) and twilio[present] == 1
    gone = Message.objects.get(pk=pks[0])
    kinds = list(gone.events.order_by("id").values_list("kind", flat=True))
    assert kinds.index("attempt_uncertain") < kinds.index("reconciled_absent") < kinds.index("failover"), (
        kinds
    )
    assert [(a.provider, a.outcome) for a in gone.attempts.order_by("number")] == [
        ("twilio", AttemptOutcome.RECONCILED_ABSENT),
        ("vonage", AttemptOutcome.ACCEPTED),
    ]
    absent_at = gone.events.get(kind="reconciled_absent").created_at
    assert gone.events.get(kind="failover").created_at >= absent_at
    kept = Message.objects.get(pk=pks[1])
    assert (kept.provider, kept.route_leg) == ("twilio", 0)
    assert not kept.events.filter(kind="failover").exists()
    assert [a.outcome for a in kept.attempts.all()] == [AttemptOutcome.RECONCILED_FOUND]
