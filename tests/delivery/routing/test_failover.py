"""Routing at birth and failover, in-process, against both sandboxes through the real Twilio and Vonage
adapters: a message moves to its route's next leg only on proof its provider did not take it."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.utils import timezone

from delivery.flow import circuit
from delivery.models import Attempt, AttemptOutcome, ProviderCircuit
from delivery.providers import get_adapter
from delivery.providers.vonage.sandbox.process import VonageSandboxProcess
from delivery.routing import failover
from delivery.sending import worker as sending
from scheduling.lifecycle import transitions
from scheduling.messages.service import message_create
from scheduling.models import Message, Status
from smsgw.config import routes as route_config
from tests.factories import sender_for, tenant_with_key

pytestmark = pytest.mark.django_db

GB = "+447400123456"
US = "+14155550123"
ROUTES = [
    {
        "name": "gb",
        "country": "GB",
        "legs": [{"provider": "vonage", "sender": "ACME"}, {"provider": "twilio", "weight": 0}],
    },
    {
        "name": "us",
        "country": "US",
        "legs": [{"provider": "twilio"}, {"provider": "vonage", "sender": "ACME", "weight": 0}],
    },
]


@pytest.fixture(scope="module")
def vonage():
    with VonageSandboxProcess() as process:
        yield process


@pytest.fixture
def routed(adapter, settings, vonage):
    vonage.reset()
    settings.VONAGE_API_KEY = vonage.api_key
    settings.VONAGE_API_SECRET = vonage.api_secret
    settings.VONAGE_SIGNATURE_SECRET = ""
    settings.VONAGE_REST_HOST = vonage.rest_host
    settings.VONAGE_CA_BUNDLE = vonage.ca_file
    settings.VONAGE_TIMEOUT_SECONDS = 5.0
    settings.SMSGW_ROUTES = route_config.parse(
        json.dumps(ROUTES), ["twilio", "vonage"], ["transactional", "bulk"]
    )
    settings.FAILOVER_RETRY_ATTEMPTS = 2
    get_adapter.cache_clear()
    yield settings
    get_adapter.cache_clear()


@pytest.fixture
def tenant(db):
    tenant = tenant_with_key("acme", allowed_countries=["US", "GB"])[0]
    sender_for(tenant, "ACME")  # the routes' Vonage legs send from it: it must be the tenant's
    return tenant


def born(tenant, to: str, body: str = "hello") -> Message:
    msg, _ = message_create(tenant=tenant, actor="api", data={"to": to, "body": body})
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    msg.refresh_from_db()
    return msg


def kinds(msg: Message) -> list[str]:
    return list(msg.events.order_by("id").values_list("kind", flat=True))


def test_a_message_is_routed_by_country_when_it_is_born(routed, tenant):
    gb, us = born(tenant, GB), born(tenant, US)
    assert (gb.provider, gb.from_number, gb.route, gb.route_leg) == ("vonage", "ACME", "settings:gb", 0)
    assert [leg["provider"] for leg in gb.route_plan] == ["vonage", "twilio"]
    # The standby Twilio leg has no sender of its own: it takes the message's (the tenant's default From).
    assert gb.route_plan[1]["from"] == tenant.default_from
    assert (us.provider, us.from_number, us.route) == ("twilio", tenant.default_from, "settings:us")


def test_no_matching_rule_keeps_the_default_provider_and_no_plan(routed, tenant, settings):
    settings.SMSGW_ROUTES = ()
    msg = born(tenant, GB)
    assert (msg.provider, msg.route, msg.route_plan, msg.route_leg) == ("twilio", "", [], 0)


def test_each_message_is_submitted_once_to_its_routes_provider(routed, tenant, sandbox, vonage):
    gb, us = born(tenant, GB), born(tenant, US)
    assert sending.send_batch([gb.pk], provider="vonage").outcomes == {"accepted": 1}
    assert sending.send_batch([us.pk], provider="twilio").outcomes == {"accepted": 1}
    gb.refresh_from_db()
    us.refresh_from_db()
    assert gb.status == us.status == Status.SENT
    assert [m["to"] for m in vonage.messages()] == [GB.removeprefix("+")]
    assert sandbox.stats()["submissions"] == 1
    assert gb.attempts.get().route == "settings:gb#0" and gb.attempts.get().provider == "vonage"
    assert us.attempts.get().provider == "twilio"


def test_an_open_circuit_moves_the_message_to_the_next_leg_before_any_call(routed, tenant, sandbox, vonage):
    msg = born(tenant, US)
    now = timezone.now()
    ProviderCircuit.objects.create(
        provider="twilio",
        account=get_adapter("twilio").account,
        state=circuit.OPEN,
        opened_at=now,
        next_probe_at=now + timezone.timedelta(seconds=600),
        window_started_at=now,
        updated_at=now,
    )
    report = sending.send_batch([msg.pk], provider="twilio")
    msg.refresh_from_db()
    assert report.claimed == 0 and report.failed_over == 1
    assert (msg.status, msg.provider, msg.route_leg, msg.from_number) == (Status.QUEUED, "vonage", 1, "ACME")
    event = msg.events.get(kind="failover")
    assert event.details["why"] == "circuit_open" and event.details["to"]["provider"] == "vonage"
    assert sandbox.stats()["submissions"] == 0
    assert sending.send_batch([msg.pk], provider="vonage").outcomes == {"accepted": 1}
    msg.refresh_from_db()
    assert msg.status == Status.SENT and len(vonage.messages()) == 1


def test_an_account_fault_holds_the_account_and_fails_over_unsent(routed, tenant, sandbox, vonage):
    sandbox.config(auth_fail=True)
    msg = born(tenant, US)
    sending.send_batch([msg.pk], provider="twilio")
    msg.refresh_from_db()
    assert (msg.status, msg.provider, msg.route_leg) == (Status.QUEUED, "vonage", 1)
    assert msg.events.get(kind="failover").details["why"] == "account_fault"
    first = msg.attempts.get()
    assert (first.provider, first.outcome) == ("twilio", AttemptOutcome.ACCOUNT_FAULT)
    assert sending.send_batch([msg.pk], provider="vonage").outcomes == {"accepted": 1}
    msg.refresh_from_db()
    assert msg.status == Status.SENT
    assert [a.provider for a in msg.attempts.order_by("number")] == ["twilio", "vonage"]
    sandbox.config(auth_fail=False)
    assert sandbox.messages_json() == [] and len(vonage.messages()) == 1


def test_transient_answers_fail_over_after_the_legs_budget_not_before(routed, tenant, sandbox, vonage):
    sandbox.config(error_rate_400=1.0, error_code_400=30008)  # 30008: transient (Twilio's errors table)
    msg = born(tenant, US)
    sending.send_batch([msg.pk], provider="twilio")
    msg.refresh_from_db()
    assert (msg.status, msg.provider, msg.route_leg) == (
        Status.QUEUED,
        "twilio",
        0,
    )  # one transient: retried there
    Message.objects.filter(pk=msg.pk).update(run_after=timezone.now())
    sending.send_batch([msg.pk], provider="twilio")
    msg.refresh_from_db()
    assert (msg.status, msg.provider, msg.route_leg, msg.attempt_count) == (Status.QUEUED, "vonage", 1, 0)
    assert msg.events.get(kind="failover").details["why"] == "retries_exhausted"
    assert sending.send_batch([msg.pk], provider="vonage").outcomes == {"accepted": 1}
    assert sandbox.messages_json() == []


def test_an_uncertain_submission_is_not_failed_over(routed, tenant, sandbox, vonage):
    sandbox.config(store_then_503_rate=1.0)
    msg = born(tenant, US)
    sending.send_batch([msg.pk], provider="twilio")
    msg.refresh_from_db()
    assert (msg.status, msg.provider, msg.route_leg) == (Status.SENDING, "twilio", 0)
    assert msg.attempts.get().outcome == AttemptOutcome.UNCERTAIN
    assert not msg.events.filter(kind="failover").exists()
    assert vonage.messages() == []


def test_a_message_on_its_last_leg_waits_as_before(routed, tenant, sandbox):
    sandbox.config(auth_fail=True)
    msg = born(tenant, GB)
    Message.objects.filter(pk=msg.pk).update(route_leg=1, provider="twilio", from_number=tenant.default_from)
    sending.send_batch([msg.pk], provider="twilio")
    msg.refresh_from_db()
    assert (msg.status, msg.reason_code, msg.route_leg) == (Status.QUEUED, "provider_hold", 1)
    assert not msg.events.filter(kind="failover").exists()
    assert Attempt.objects.filter(message=msg).count() == 1


def test_the_api_shows_the_route_and_its_legs(routed, tenant, client):
    from scheduling.messages.api import MessageOutput

    msg = born(tenant, GB)
    route = MessageOutput(msg).data["route"]
    assert route == {
        "name": "settings:gb",
        "leg": 0,
        "legs": [
            {"provider": "vonage", "account": "", "sender": "ACME"},
            {"provider": "twilio", "account": "", "sender": tenant.default_from},
        ],
    }


def test_the_release_step_moves_due_messages_off_a_provider_whose_circuit_is_open(routed, tenant, settings):
    from scheduling.dispatch import release

    settings.CIRCUIT_MIN_FAILURES = 3
    adapter = get_adapter("twilio")
    assert circuit.circuit_report(
        provider="twilio", account=adapter.account, ok=0, failed=5, error="503"
    ).is_open
    routed_msg, _ = message_create(tenant=tenant, actor="api", data={"to": US, "body": "a"})
    settings.SMSGW_ROUTES = ()
    plain, _ = message_create(tenant=tenant, actor="api", data={"to": US, "body": "b"})
    report = release.due_release(now=timezone.now())
    routed_msg.refresh_from_db()
    plain.refresh_from_db()
    # The routed one moved to its standby leg, due at once; the one without a route waits for the circuit.
    assert (routed_msg.status, routed_msg.provider, routed_msg.route_leg) == (Status.QUEUED, "vonage", 1)
    assert routed_msg.events.get(kind="failover").details["why"] == "circuit_open"
    assert (plain.status, plain.reason_code) == (Status.SCHEDULED, "provider_unavailable")
    assert report.unavailable == 1
    # The next pass hands it (a queued message: published again) to Vonage's send queue (its circuit is
    # closed), not parked as unavailable.
    report = release.due_release(now=timezone.now())
    assert (report.republished, report.unavailable) == (1, 0)


def test_a_reconcile_look_up_probes_an_open_circuit_that_nothing_waits_on(routed, tenant, sandbox):
    """With routes, nothing waits on an open circuit to be sent as its probe (it failed over), while the
    uncertain messages wait for the circuit: the reconciler's look-up is the probe, and closes it."""
    from delivery.sending import reconcile

    sandbox.config(store_then_503_rate=1.0)
    msg = born(tenant, US)
    sending.send_batch([msg.pk], provider="twilio")
    sandbox.config(store_then_503_rate=0.0)
    account = get_adapter("twilio").account
    now = timezone.now()
    ProviderCircuit.objects.update_or_create(
        provider="twilio",
        account=account,
        defaults={
            "state": circuit.OPEN,
            "opened_at": now,
            "next_probe_at": now,
            "window_started_at": now,
            "updated_at": now,
        },
    )
    outcome = reconcile.reconcile_many([msg.pk])
    msg.refresh_from_db()
    assert outcome == {"found": 1, "probe_closed": 1}
    assert msg.status in (Status.SENT, Status.DELIVERED) and msg.route_leg == 0
    assert not circuit.circuit_state("twilio", account).is_open


def test_the_claims_rows_carry_the_plan_as_legs_and_fail_over_from_them(routed, tenant, sandbox, vonage):
    """The send worker's claim returns its rows through a raw cursor, and an answer recorded while the
    circuit is open fails the message over from that row. On PostgreSQL Django loads jsonb as its text:
    the row's plan was once a string, the recording took a character for the next leg (AttributeError),
    left its whole group of answers unrecorded and the messages ``sending`` (bench failover,
    2026-12-02)."""
    msg = born(tenant, US)
    now = timezone.now()
    (row,) = transitions.transition_many(
        [msg.pk],
        from_status=Status.QUEUED,
        to_status=Status.SENDING,
        kind="attempt_started",
        returning=sending.CLAIM_RETURNING,
        now=now,
    )
    assert [leg["provider"] for leg in row["route_plan"]] == ["twilio", "vonage"]
    # As the recording hands it over (delivery.sending.recording._move_add).
    moved = failover.failover_rows(
        [({**row, "status": Status.SENDING}, failover.Why.CIRCUIT, "provider circuit open")], now=now
    )
    msg.refresh_from_db()
    assert moved == [msg.pk]
    assert (msg.status, msg.provider, msg.route_leg, msg.from_number) == (Status.QUEUED, "vonage", 1, "ACME")
    assert msg.events.get(kind="failover").details["to"]["provider"] == "vonage"


def test_raw_rows_give_the_plan_as_legs_when_the_driver_reads_json_as_text(routed, tenant):
    """What the send workers' connections do on PostgreSQL (Django registers a text loader for jsonb):
    the claim's rows must still carry the legs, not their JSON text."""
    msg = born(tenant, US)
    with connection.cursor() as cur:
        cur.execute("SELECT CAST(route_plan AS text) FROM scheduling_message WHERE id = %s", [msg.pk])
        (row,) = transitions.rows_from(cur, ["route_plan"])
    assert [leg["provider"] for leg in row["route_plan"]] == ["twilio", "vonage"]
