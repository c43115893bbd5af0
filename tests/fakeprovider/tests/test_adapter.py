"""The fake provider's adapter against its sandbox, a real separate process."""

from __future__ import annotations

import pytest

from delivery.providers.base import ErrorClass, Outcome, Scope, Submission
from tests.fakeprovider.adapter import FakeAdapter
from tests.fakeprovider.config import SIGNATURE_HEADER, signature
from tests.fakeprovider.sandbox.process import FakeSandboxProcess
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def sandbox():
    with FakeSandboxProcess() as process:
        yield process


@pytest.fixture
def adapter(settings, sandbox):
    settings.FAKEPROV_BASE_URL = sandbox.base_url
    settings.FAKEPROV_TOKEN = sandbox.token
    settings.FAKEPROV_SIGNING_SECRET = sandbox.secret
    settings.FAKEPROV_TIMEOUT_SECONDS = 5.0
    adapter = FakeAdapter(name="fakeprov")
    yield adapter
    adapter.close()


def _submission(n: int) -> Submission:
    return Submission(message_id=n, to=f"+1555000{n:04d}", body=f"hello {n}", sender="+15550009999")


def test_a_batch_is_accepted_each_with_its_id_and_then_found_delivered(adapter, sandbox):
    results = adapter.submit_many([_submission(1), _submission(2)])
    assert [r.outcome for r in results] == [Outcome.ACCEPTED, Outcome.ACCEPTED]
    ids = [r.provider_message_id for r in results]
    assert len(set(ids)) == 2 and all(i.startswith("FP") for i in ids)
    wait_for(
        lambda: all(adapter.fetch_status(i, timeout=5).normalized_status == "delivered" for i in ids),
        10,
        "delivered",
    )
    assert adapter.fetch_status("FP9999999999", timeout=5) is None


def test_a_refused_token_is_an_account_fault_of_the_account(adapter, settings):
    settings.FAKEPROV_TOKEN = "wrong"
    [result] = adapter.submit_many([_submission(3)])
    assert result.outcome == Outcome.REJECTED
    assert (result.error_class, result.scope, result.http_status) == (
        ErrorClass.ACCOUNT_FAULT,
        Scope.ACCOUNT,
        401,
    )


def test_nothing_listening_is_transient_not_uncertain(adapter, settings):
    from tests.processes import free_port

    settings.FAKEPROV_BASE_URL = f"http://127.0.0.1:{free_port()}"
    [result] = adapter.submit_many([_submission(4)])
    assert result.outcome == Outcome.TRANSIENT and result.answered is False


def test_a_receipt_signed_by_the_sandbox_is_taken_and_a_forged_one_refused(adapter, sandbox):
    url = "http://gateway.example/receipts/fakeprov/?m=0123456789abcdef01234567&a=2"
    fields = {"id": "FP0000000001", "status": "delivered"}
    assert adapter.validate_callback(url, fields, {SIGNATURE_HEADER: signature(sandbox.secret, url, fields)})
    assert not adapter.validate_callback(url, fields, {SIGNATURE_HEADER: signature("other", url, fields)})
    assert not adapter.validate_callback(
        url, {**fields, "status": "failed"}, {SIGNATURE_HEADER: signature(sandbox.secret, url, fields)}
    )
    parsed = adapter.parse_callback(fields, {"m": "0123456789abcdef01234567", "a": "2"})
    assert (parsed.provider_message_id, parsed.normalized_status, parsed.attempt_hint) == (
        "FP0000000001",
        "delivered",
        2,
    )
