"""VonageAdapter against the Vonage sandbox running as a real separate process (HTTPS over TCP, the
official SDK), and its delivery receipts as the sandbox sends them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from delivery.providers import PROVIDERS, ProviderQueryError, get_adapter
from delivery.providers.base import RECEIPT_STATUSES, ErrorClass, Outcome, Scope, Submission
from delivery.providers.vonage import CAPABILITIES, errors
from delivery.providers.vonage.adapter import VonageAdapter
from delivery.providers.vonage.sandbox.parts import signature
from delivery.providers.vonage.sandbox.process import VonageSandboxProcess
from delivery.providers.vonage.tests.helpers import FAST, ReceiptReceiver
from sandbox.process import unused_port
from tests.waiting import wait_for

TO = "447700900000"
REF = "0123456789abcdef01234567"  # a message's public ref (24 hex digits)


@pytest.fixture(scope="module")
def vonage():
    with VonageSandboxProcess() as process:
        yield process


@pytest.fixture(autouse=True)
def fresh(vonage):
    vonage.reset()
    vonage.config(**FAST)
    yield


@pytest.fixture
def vonage_settings(settings, vonage):
    settings.VONAGE_API_KEY = vonage.api_key
    settings.VONAGE_API_SECRET = vonage.api_secret
    settings.VONAGE_SIGNATURE_SECRET = ""
    settings.VONAGE_SIGNATURE_METHOD = "md5hash"
    settings.VONAGE_REST_HOST = vonage.rest_host
    settings.VONAGE_CA_BUNDLE = vonage.ca_file
    settings.VONAGE_TIMEOUT_SECONDS = 5.0
    settings.SEND_CONCURRENCY = 4
    return settings


@pytest.fixture
def adapter(vonage_settings):
    a = VonageAdapter()
    yield a
    a.close()


@pytest.fixture
def receiver():
    r = ReceiptReceiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def sub(body: str = "hello", to: str = TO, callback: str = "", **kwargs) -> Submission:
    kwargs.setdefault("sender", "Acme")
    return Submission(message_id=1, to=to, body=body, status_callback=callback, **kwargs)


def callback_url(adapter: VonageAdapter, receiver: ReceiptReceiver, attempt: int = 1) -> str:
    return adapter.status_callback_url(receiver.url(""), REF, attempt)


def receipts(vonage, receiver, expected: int) -> list[dict]:
    def done():
        callbacks = vonage.stats()["callbacks"]
        return callbacks["pending"] == 0 and callbacks["sent"] >= expected

    wait_for(done, 10, f"{expected} receipts sent")
    return receiver.fields()


# --- registry -------------------------------------------------------------------------------------------


def test_registered_with_its_capabilities(vonage_settings):
    assert "vonage" in PROVIDERS
    get_adapter.cache_clear()
    try:
        assert isinstance(get_adapter("vonage"), VonageAdapter)
        assert get_adapter("vonage").capabilities == CAPABILITIES
    finally:
        get_adapter.cache_clear()
    assert not CAPABILITIES.lookup_by_recipient and not CAPABILITIES.fetch_by_id
    assert CAPABILITIES.per_part_ids
    assert (CAPABILITIES.validity_period.minimum, CAPABILITIES.validity_period.maximum) == (20, 604800)


# --- submissions ----------------------------------------------------------------------------------------


def test_accepted_single_part_with_client_ref_callback_and_ttl(adapter, vonage, receiver):
    [result] = adapter.submit_many([sub(callback=callback_url(adapter, receiver), validity_period=3600)])
    assert result.outcome == Outcome.ACCEPTED
    [stored] = vonage.messages(to=TO)
    assert result.provider_message_id == stored["message-id"]
    assert result.response["part_ids"] == [stored["message-id"]]
    assert result.response["client_ref"] == f"{REF}.1"
    assert result.validity_period == 3600
    assert [m["message-id"] for m in vonage.messages(client_ref=f"{REF}.1")] == [stored["message-id"]]
    assert stored["callback"] == callback_url(adapter, receiver)
    assert stored["form"]["ttl"] == "3600000"
    assert result.http_status == 200


def test_accepted_three_parts_records_every_part_id(adapter, vonage):
    body = "x" * 400  # GSM-7: parts of 153 -> 3
    [result] = adapter.submit_many([sub(body)])
    assert result.outcome == Outcome.ACCEPTED
    stored = vonage.messages(to=TO)
    assert len(stored) == 3
    assert result.response["part_ids"] == [m["message-id"] for m in stored]
    assert result.provider_message_id == stored[0]["message-id"]
    assert result.response["message_count"] == "3"


def test_unicode_body_is_sent_as_unicode(adapter, vonage):
    [result] = adapter.submit_many([sub("Grüße 😀")])
    assert result.outcome == Outcome.ACCEPTED
    assert len(vonage.messages(to=TO)) == 1


@pytest.mark.parametrize(
    ("status", "outcome", "error_class", "scope"),
    [
        (1, Outcome.TRANSIENT, ErrorClass.THROTTLED, Scope.ACCOUNT),
        (4, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.ACCOUNT),
        (9, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.ACCOUNT),
        (15, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.SENDER),
        (29, Outcome.REJECTED, ErrorClass.PERMANENT, None),
        (5, Outcome.UNCERTAIN, ErrorClass.TRANSIENT, None),
    ],
)
def test_refusals_are_classified(adapter, vonage, status, outcome, error_class, scope):
    vonage.config(rules=[{"to": TO, "action": "status", "status": status}])
    [result] = adapter.submit_many([sub()])
    assert (result.outcome, result.error_class, result.scope) == (outcome, error_class, scope)
    assert result.error_code == str(status)
    assert vonage.messages(to=TO) == []


def test_wrong_secret_is_an_account_fault(adapter, vonage, vonage_settings):
    vonage_settings.VONAGE_API_SECRET = "not-the-secret"
    [result] = adapter.submit_many([sub()])
    assert (result.outcome, result.error_class, result.error_code) == (
        Outcome.REJECTED,
        ErrorClass.ACCOUNT_FAULT,
        "4",
    )


def test_insufficient_balance_is_an_account_fault(adapter, vonage):
    vonage.config(balance=0.01)
    [result] = adapter.submit_many([sub()])
    assert (result.outcome, result.error_class, result.error_code) == (
        Outcome.REJECTED,
        ErrorClass.ACCOUNT_FAULT,
        "9",
    )


@pytest.mark.parametrize("action", ["503", "500", "store_then_503"])
def test_http_5xx_is_uncertain(adapter, vonage, action):
    vonage.config(rules=[{"to": TO, "action": action}])
    [result] = adapter.submit_many([sub()])
    assert result.outcome == Outcome.UNCERTAIN
    assert result.http_status == int(action[-3:])
    assert len(vonage.messages(to=TO)) == (1 if action.startswith("store") else 0)


def test_store_then_drop_is_one_uncertain_submission_never_resent(adapter, vonage):
    vonage.config(rules=[{"to": TO, "action": "store_then_drop"}])
    [result] = adapter.submit_many([sub()])
    assert result.outcome == Outcome.UNCERTAIN
    assert result.response["request_sent"] is True
    assert len(vonage.messages(to=TO)) == 1  # ONE request: the SDK did not send it again
    assert vonage.stats()["submissions"] == 1


def test_read_timeout_is_uncertain(adapter, vonage, vonage_settings):
    vonage_settings.VONAGE_TIMEOUT_SECONDS = 1.0
    vonage.config(timeout_hang_seconds=3, rules=[{"to": TO, "action": "accept_then_hang"}])
    [result] = adapter.submit_many([sub()])
    assert result.outcome == Outcome.UNCERTAIN
    assert len(vonage.messages(to=TO)) == 1


def test_connection_refused_is_transient(adapter, vonage_settings):
    vonage_settings.VONAGE_REST_HOST = f"127.0.0.1:{unused_port()}"
    [result] = adapter.submit_many([sub()])
    assert (result.outcome, result.error_class) == (Outcome.TRANSIENT, ErrorClass.TRANSIENT)
    assert result.response["request_sent"] is False


def test_a_batch_keeps_its_order(adapter, vonage):
    vonage.config(rules=[{"to": "447700900002", "action": "status", "status": 1}])
    results = adapter.submit_many([sub(to="447700900001"), sub(to="447700900002"), sub(to="447700900003")])
    assert [r.outcome for r in results] == [Outcome.ACCEPTED, Outcome.TRANSIENT, Outcome.ACCEPTED]


def test_signed_requests_with_an_hmac_secret(adapter, vonage, vonage_settings):
    vonage.config(signature_secret="s3cret-signature", signature_method="sha256", require_signature=True)
    vonage_settings.VONAGE_SIGNATURE_SECRET = "s3cret-signature"
    vonage_settings.VONAGE_SIGNATURE_METHOD = "sha256"
    [result] = adapter.submit_many([sub()])
    assert result.outcome == Outcome.ACCEPTED, result


def test_no_look_ups(adapter):
    with pytest.raises(ProviderQueryError):
        adapter.fetch("0A00000000000001")
    with pytest.raises(ProviderQueryError):
        adapter.find_submissions(
            to=TO,
            sender="Acme",
            sender_pool="",
            created_after=datetime.now(UTC) - timedelta(minutes=1),
            created_before=datetime.now(UTC),
        )


# --- delivery receipts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "POST-JSON", "GET"])
def test_receipts_parse_with_hints_from_the_query_or_the_client_ref(adapter, vonage, receiver, method):
    vonage.config(receipt_method=method)
    [result] = adapter.submit_many([sub("x" * 400, callback=callback_url(adapter, receiver, 2))])
    fields = receipts(vonage, receiver, 3)
    parsed = [adapter.parse_callback(f, {}) for f in fields]  # no query: the client-ref says
    assert sorted(p.provider_message_id for p in parsed) == sorted(result.response["part_ids"])
    for p in parsed:
        assert (p.raw_status, p.normalized_status, p.error_code) == ("delivered", "delivered", "")
        assert (p.message_hint, p.attempt_hint) == (REF, 2)
        assert p.done_at is not None
        assert TO not in str(p.payload)  # the number is masked
    query = adapter.parse_callback(fields[0], {"m": REF, "a": "2"})
    assert (query.message_hint, query.attempt_hint) == (REF, 2)


def test_rejected_and_expired_receipts(adapter, vonage, receiver):
    vonage.config(receipt_rejected_share=1.0, receipt_rejected_err_code=8)
    adapter.submit_many([sub(callback=callback_url(adapter, receiver))])
    [fields] = receipts(vonage, receiver, 1)
    parsed = adapter.parse_callback(fields, {})
    assert (parsed.raw_status, parsed.normalized_status, parsed.error_code) == ("rejected", "failed", "8")
    assert adapter.classify(parsed.error_code).error_class == ErrorClass.TRANSIENT
    assert adapter.normalize_status("expired") == "undelivered"
    assert adapter.normalize_status("failed") == "undelivered"
    assert adapter.normalize_status("buffered") == "sent"
    assert adapter.normalize_status("unknown") == ""


@pytest.mark.parametrize("method", ["md5hash", "md5", "sha1", "sha256", "sha512"])
def test_signed_receipts_validate_and_tampered_ones_do_not(
    adapter, vonage, vonage_settings, receiver, method
):
    vonage.config(signature_secret="s3cret-signature", signature_method=method)
    vonage_settings.VONAGE_SIGNATURE_SECRET = "s3cret-signature"
    vonage_settings.VONAGE_SIGNATURE_METHOD = method
    [result] = adapter.submit_many([sub(callback=callback_url(adapter, receiver))])
    assert result.outcome == Outcome.ACCEPTED, result
    [fields] = receipts(vonage, receiver, 1)
    assert adapter.validate_callback("", dict(fields), {})
    assert not adapter.validate_callback("", {**fields, "status": "failed"}, {})
    assert not adapter.validate_callback("", {k: v for k, v in fields.items() if k != "sig"}, {})
    vonage_settings.VONAGE_SIGNATURE_SECRET = "another-secret"
    assert not adapter.validate_callback("", dict(fields), {})


def test_a_signature_secret_rotation_holds_nothing(adapter, vonage, vonage_settings, receiver):
    """The dashboard keeps one signature secret and signs with the new one from the moment it is saved.
    While VONAGE_SIGNATURE_SECRET_PREVIOUS is set, receipts signed with either secret verify, and
    submissions authenticate with the API secret (a signed one would fail, status 14, on one side of the
    swap): through the sandbox, which signs receipts as Vonage does, before and after the swap."""
    old, new = "old-signature-secret", "new-signature-secret"

    def one_receipt(result) -> dict:
        wanted = result.response["part_ids"][0]
        wait_for(lambda: any(f.get("messageId") == wanted for f in receiver.fields()), 10, "its receipt")
        return next(f for f in receiver.fields() if f.get("messageId") == wanted)

    vonage.config(signature_secret=old, signature_method="sha256")  # Vonage, before the swap
    vonage_settings.VONAGE_SIGNATURE_METHOD = "sha256"
    vonage_settings.VONAGE_SIGNATURE_SECRET = new
    vonage_settings.VONAGE_SIGNATURE_SECRET_PREVIOUS = old
    [before] = adapter.submit_many([sub(callback=callback_url(adapter, receiver))])
    assert before.outcome == Outcome.ACCEPTED, before
    signed_old = one_receipt(before)
    assert adapter.validate_callback("", dict(signed_old), {})

    vonage.config(signature_secret=new, signature_method="sha256")  # the swap, in the dashboard
    [after] = adapter.submit_many([sub(to="447700900002", callback=callback_url(adapter, receiver))])
    assert after.outcome == Outcome.ACCEPTED, after
    signed_new = one_receipt(after)
    assert adapter.validate_callback("", dict(signed_new), {})
    assert adapter.validate_callback("", dict(signed_old), {})  # queued before the swap, posted after
    forged = {k: v for k, v in signed_new.items() if k != "sig"}
    forged["sig"] = signature(forged, "someone-elses-secret", "sha256")
    assert not adapter.validate_callback("", forged, {})

    vonage_settings.VONAGE_SIGNATURE_SECRET_PREVIOUS = ""  # the rotation is over
    assert not adapter.validate_callback("", dict(signed_old), {})
    assert adapter.validate_callback("", dict(signed_new), {})
    vonage.config(signature_secret=new, signature_method="sha256", require_signature=True)
    [signed] = adapter.submit_many([sub(to="447700900003")])  # signed again, with the new secret
    assert signed.outcome == Outcome.ACCEPTED, signed


def test_unsigned_receipts_are_taken_without_a_signature_secret(adapter):
    assert adapter.validate_callback("", {"messageId": "0A00000000000001", "status": "delivered"}, {})


# --- the tables -----------------------------------------------------------------------------------------


def test_every_documented_status_and_err_code_is_classified():
    from delivery.providers.vonage.sandbox.config import STATUS_TEXT

    assert set(map(str, STATUS_TEXT)) <= set(errors.SUBMISSION_TABLE)
    for status in ("1", "10"):
        assert errors.submission_outcome(status, errors.classify(status, 200)) == Outcome.TRANSIENT
    assert errors.submission_outcome("5", errors.classify("5", 200)) == Outcome.UNCERTAIN
    assert errors.submission_outcome("99", errors.classify("99", 200)) == Outcome.REJECTED
    assert errors.classify("42") == errors.UNKNOWN_IN_CALLBACK
    for normalized in ("sent", "delivered", "undelivered", "failed"):
        assert normalized in RECEIPT_STATUSES


# --- through the core, by name --------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_message_goes_through_vonage_and_its_receipts_deliver_it(
    vonage_settings, vonage, receiver, api, client
):
    """The sending worker submits through the registered adapter; the sandbox's signed form receipts,
    posted to our receipts endpoint, deliver the message."""
    from django.utils import timezone

    from delivery.sending import worker as sending
    from receipts.processor import receipts_process_due
    from scheduling.models import Message, Status
    from tests.factories import messages_bulk

    vonage.config(receipt_method="POST", signature_secret="s3cret-signature", signature_method="sha256")
    vonage_settings.VONAGE_SIGNATURE_SECRET = "s3cret-signature"
    vonage_settings.VONAGE_SIGNATURE_METHOD = "sha256"
    vonage_settings.SMSGW_PUBLIC_BASE_URL = receiver.url("")
    get_adapter.cache_clear()
    try:
        (pk,) = messages_bulk(api.tenant, 1, due_at=timezone.now() - timedelta(seconds=1), body="y" * 200)
        Message.objects.filter(pk=pk).update(provider="vonage", status=Status.QUEUED)
        report = sending.send_batch([pk], provider="vonage")
        assert report.claimed == 1
        msg = Message.objects.get(pk=pk)
        parts = vonage.messages()
        assert len(parts) == 2
        assert (msg.status, msg.provider_message_id) == (Status.SENT, parts[0]["message-id"])
        attempt = msg.attempts.get()
        assert attempt.response["part_ids"] == [p["message-id"] for p in parts]
        ref = msg.public_id.removeprefix("msg_")
        assert parts[0]["client-ref"] == f"{ref}.1"
        records = receipts(vonage, receiver, 2)
        path = parts[0]["callback"].removeprefix(receiver.url(""))
        for fields in records:
            answer = client.post(path, fields)
            assert answer.status_code in (200, 201), answer.content
        forged = {**records[0], "status": "failed"}
        assert client.post(path, forged).status_code == 403
        wait_for(
            lambda: receipts_process_due() or Message.objects.get(pk=pk).status == Status.DELIVERED,
            10,
            "delivered",
        )
        assert Message.objects.get(pk=pk).status == Status.DELIVERED
    finally:
        get_adapter.cache_clear()


@pytest.mark.django_db
def test_json_receipts_are_taken_by_the_receipts_endpoint(vonage_settings, vonage, receiver, client):
    vonage.config(receipt_method="POST-JSON", signature_secret="s3cret-signature", signature_method="sha1")
    vonage_settings.VONAGE_SIGNATURE_SECRET = "s3cret-signature"
    vonage_settings.VONAGE_SIGNATURE_METHOD = "sha1"
    get_adapter.cache_clear()
    try:
        adapter = get_adapter("vonage")
        adapter.submit_many([sub(callback=callback_url(adapter, receiver))])
        [fields] = receipts(vonage, receiver, 1)
        path = f"/receipts/vonage/?m={REF}&a=1"
        assert client.post(path, fields, content_type="application/json").status_code == 201
        # The same signed request again is a replay (receipts.replay): refused, nothing stored twice.
        assert client.post(path, fields, content_type="application/json").status_code == 403
        forged = {**fields, "err-code": "6"}
        assert client.post(path, forged, content_type="application/json").status_code == 403
        assert client.post(path, "[1]", content_type="application/json").status_code == 400
    finally:
        get_adapter.cache_clear()


def test_production_needs_vonage_credentials_and_its_signature_secret(monkeypatch):
    from delivery.providers.vonage.config import load_settings

    for name in ("VONAGE_API_KEY", "VONAGE_API_SECRET", "VONAGE_SIGNATURE_SECRET", "VONAGE_SIGNATURE_METHOD"):
        monkeypatch.delenv(name, raising=False)
    assert "VONAGE_API_KEY" in (load_settings(True).problem or "")
    assert load_settings(False).problem is None  # the sandbox's defaults
    monkeypatch.setenv("VONAGE_API_KEY", "a1b2c3d4")
    monkeypatch.setenv("VONAGE_API_SECRET", "a-real-api-secret")
    # Without a signature secret no receipt or inbound STOP can be verified.
    assert "VONAGE_SIGNATURE_SECRET must be set" in (load_settings(True).problem or "")
    monkeypatch.delenv("VONAGE_API_SECRET")
    monkeypatch.setenv("VONAGE_SIGNATURE_SECRET", "s")
    assert "VONAGE_API_SECRET" in (load_settings(True).problem or "")  # md5hash cannot sign requests
    monkeypatch.setenv("VONAGE_SIGNATURE_METHOD", "sha256")
    assert load_settings(True).problem is None
    monkeypatch.setenv("VONAGE_API_KEY", "abcd1234")  # the sandbox's public key
    assert "VONAGE_API_KEY is a public example value" in (load_settings(True).problem or "")
    assert load_settings(True).secret_settings == (
        "VONAGE_API_SECRET",
        "VONAGE_SIGNATURE_SECRET",
        "VONAGE_SIGNATURE_SECRET_PREVIOUS",
    )
