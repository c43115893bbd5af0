"""The provider is a per-message key from end to end: a second provider account is one adapter and one
registry line, and its messages are released against its own limits and circuit, submitted through its
own adapter, and called back on its own receipt URL. Two real sandboxes, two real adapters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.flow import circuit
from delivery.models import ProviderCircuit
from delivery.providers import PROVIDERS, get_adapter
from delivery.providers.twilio.adapter import TwilioAdapter
from delivery.sending import worker as sending
from scheduling.dispatch import release
from scheduling.models import Message, Status
from tests.factories import messages_bulk
from tests.sandbox_process import SandboxProcess

pytestmark = pytest.mark.django_db
SECOND = "twilio-eu"
SECOND_SID = "AC" + "e" * 32


@pytest.fixture(scope="module")
def second_sandbox():
    with SandboxProcess(account_sid=SECOND_SID, auth_token="second-token") as process:
        yield process


@pytest.fixture
def two_providers(adapter, settings, second_sandbox):
    """``twilio`` (the default, the module's sandbox) and ``twilio-eu``: the same adapter class with its
    own settings prefix, registered with one line, as a second account would be."""
    second_sandbox.reset()
    settings.TWILIO_EU_ACCOUNT_SID = second_sandbox.account_sid
    settings.TWILIO_EU_AUTH_TOKEN = second_sandbox.auth_token
    settings.TWILIO_EU_API_BASE_URL = second_sandbox.base_url
    settings.SMSGW_PUBLIC_BASE_URL = "https://sms.example.com"
    PROVIDERS[SECOND] = lambda: TwilioAdapter(name=SECOND, settings_prefix="TWILIO_EU")
    get_adapter.cache_clear()
    yield adapter, second_sandbox
    del PROVIDERS[SECOND]
    get_adapter.cache_clear()


def published(monkeypatch) -> list[tuple[str, list[int], str]]:
    """What the release step publishes (queue, ids, provider), captured at the broker boundary."""
    calls: list[tuple[str, list[int], str]] = []
    monkeypatch.setattr(
        release,
        "_publish",
        lambda queue, ids, provider, not_before, headers=None: calls.append((queue, ids, provider)),
    )
    return calls


def test_a_new_message_is_born_with_the_default_provider(api, settings):
    settings.SMSGW_PROVIDER = "twilio"
    r = api.post("/v1/messages", {"to": "+14155550123", "body": "hi"}, format="json")
    assert r.status_code == 201, r.content
    assert Message.objects.get(public_id=r.json()["id"]).provider == "twilio"


def test_each_message_goes_through_its_own_providers_adapter(
    two_providers, api, monkeypatch, sandbox, django_capture_on_commit_callbacks
):
    _, second = two_providers
    now = timezone.now()
    pks = messages_bulk(api.tenant, 6, due_at=now - timedelta(seconds=1))
    eu = pks[:3]
    Message.objects.filter(pk__in=eu).update(provider=SECOND)
    calls = published(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):
        release.due_release(now=now)

    by_provider = {provider: set(ids) for _, ids, provider in calls}
    assert by_provider == {SECOND: set(eu), "twilio": set(pks[3:])}

    # A batch is claimed only by its own provider's adapter: the wrong one claims nothing.
    assert sending.send_batch(eu, provider="twilio").claimed == 0
    assert sending.send_batch(eu, provider=SECOND).claimed == 3
    assert sending.send_batch(pks[3:], provider="twilio").claimed == 3

    assert second.stats()["submissions"] == 3
    assert sandbox.stats()["submissions"] == 3
    sent = Message.objects.filter(pk__in=pks)
    assert {m.pk: m.status for m in sent} == {pk: Status.SENT for pk in pks}
    assert {m.provider for m in sent if m.pk in eu} == {SECOND}
    # Its callbacks come back on its own receipt URL, named by the message's provider.
    callbacks = [
        second.message_info(m.provider_message_id)["form"]["StatusCallback"] for m in sent if m.pk in eu
    ]
    assert all(url.startswith("https://sms.example.com/receipts/twilio-eu/?") for url in callbacks)


def test_an_open_circuit_holds_only_its_own_providers_messages(two_providers, api):
    now = timezone.now()
    pks = messages_bulk(api.tenant, 4, due_at=now - timedelta(seconds=1))
    eu = pks[:2]
    Message.objects.filter(pk__in=eu).update(provider=SECOND)
    ProviderCircuit.objects.create(
        provider=SECOND,
        account=SECOND_SID,
        state=circuit.OPEN,
        opened_at=now,
        next_probe_at=now + timedelta(seconds=30),
        window_started_at=now,
        updated_at=now,
    )
    report = release.due_release(now=now)
    assert report.unavailable == 2
    assert sum(report.queued.values()) == 2
    rows = {m.pk: (m.status, m.reason_code) for m in Message.objects.filter(pk__in=pks)}
    assert rows == {
        **{pk: (Status.SCHEDULED, circuit.REASON_UNAVAILABLE) for pk in eu},
        **{pk: (Status.QUEUED, "") for pk in pks[2:]},
    }
    # Closing it releases its own waiting messages, nobody else's.
    assert circuit.circuit_close(SECOND, SECOND_SID, actor="test") == 2
