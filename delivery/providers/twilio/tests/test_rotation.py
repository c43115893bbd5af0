"""An Auth Token rotation holds nothing: while TWILIO_AUTH_TOKEN_PREVIOUS is set, a callback signed with the
old token (Twilio signs with the primary until the new secondary is promoted, and one queued before the
promotion arrives after it) and one signed with the new are both taken; once it is unset, only the new.
Signed by the sandbox's own signing code (``twilio_signature``), and through the sandbox playing Twilio's
steps, checked by the adapter as the receipt and inbound endpoints check them."""

from __future__ import annotations

import pytest

from delivery.providers.base import Outcome, Submission
from delivery.providers.twilio.adapter import TwilioAdapter
from delivery.providers.twilio.config import load_settings
from delivery.providers.twilio.sandbox.callbacks import twilio_signature
from delivery.providers.twilio.tests.test_sandbox_callbacks import FAST, Receiver
from tests.waiting import wait_for

OLD = "0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld01"
NEW = "n3wn3wn3wn3wn3wn3wn3wn3wn3wn3w02"
URL = "https://sms.example.com/receipts/twilio/?m=msg_01&a=1"
FROM = "+15005550006"
PARAMS = {"MessageSid": "SM" + "1" * 32, "MessageStatus": "delivered", "AccountSid": "AC" + "0" * 32}


def signed(token: str) -> dict[str, str]:
    return {"X-Twilio-Signature": twilio_signature(token, URL, PARAMS)}


@pytest.fixture
def rotating(settings):
    settings.TWILIO_AUTH_TOKEN = NEW
    settings.TWILIO_AUTH_TOKEN_PREVIOUS = OLD
    settings.TWILIO_WEBHOOK_SHARED_KEYS = {}
    return settings


def test_during_a_rotation_callbacks_signed_with_either_token_are_taken_and_others_refused(rotating):
    adapter = TwilioAdapter()
    assert adapter.validate_callback(URL, PARAMS, signed(OLD))  # before the promotion
    assert adapter.validate_callback(URL, PARAMS, signed(NEW))  # after it
    assert not adapter.validate_callback(URL, PARAMS, signed("n0t-0ur-t0ken-at-all-n0t-0urs-03"))
    assert not adapter.validate_callback(URL, {**PARAMS, "MessageStatus": "failed"}, signed(OLD))  # tampered
    assert not adapter.validate_callback(URL, PARAMS, {})

    rotating.TWILIO_AUTH_TOKEN_PREVIOUS = ""  # the rotation is over
    assert not adapter.validate_callback(URL, PARAMS, signed(OLD))
    assert adapter.validate_callback(URL, PARAMS, signed(NEW))


def test_a_second_account_never_verifies_with_the_first_accounts_previous_token(rotating):
    """A token being rotated out belongs to one account: TWILIO_EU_* does not inherit TWILIO_*'s."""
    rotating.TWILIO_EU_ACCOUNT_SID = "AC" + "e" * 32
    rotating.TWILIO_EU_AUTH_TOKEN = NEW
    adapter = TwilioAdapter(name="twilio-eu", settings_prefix="TWILIO_EU")
    assert adapter.validate_callback(URL, PARAMS, signed(NEW))
    assert not adapter.validate_callback(URL, PARAMS, signed(OLD))


def test_the_previous_token_is_a_secret_read_from_a_file_and_never_logged(monkeypatch, tmp_path):
    (tmp_path / "previous").write_text(OLD + "\n")
    monkeypatch.setenv("TWILIO_AUTH_TOKEN_PREVIOUS_FILE", str(tmp_path / "previous"))
    monkeypatch.delenv("TWILIO_AUTH_TOKEN_PREVIOUS", raising=False)
    loaded = load_settings(False)
    assert loaded.values["TWILIO_AUTH_TOKEN_PREVIOUS"] == OLD
    assert "TWILIO_AUTH_TOKEN_PREVIOUS" in loaded.secret_settings  # redacted from every log line
    monkeypatch.setenv("TWILIO_AUTH_TOKEN_PREVIOUS", "sandbox-auth-token")
    monkeypatch.delenv("TWILIO_AUTH_TOKEN_PREVIOUS_FILE")
    monkeypatch.setenv("TWILIO_ACCOUNT_SID", "AC" + "1" * 32)
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", NEW)
    assert "TWILIO_AUTH_TOKEN_PREVIOUS is a public example value" in (load_settings(True).problem or "")


def test_a_rotation_through_the_sandbox_holds_nothing(adapter, sandbox, twilio_settings):
    """Twilio's own steps, played by the sandbox: a secondary token is made, the gateway sends with it
    while callbacks are still signed with the primary, then the secondary is promoted. Every submission
    is accepted and every genuine callback verifies; the old token's callbacks stop verifying only when
    the rotation is declared over."""
    receiver = Receiver()
    receiver.thread.start()
    try:
        sandbox.config(secondary_auth_token=NEW, **FAST)
        twilio_settings.TWILIO_AUTH_TOKEN = NEW  # step 2: requests use the secondary
        twilio_settings.TWILIO_AUTH_TOKEN_PREVIOUS = sandbox.auth_token
        before = _send(adapter, receiver, "+14155550101")
        signed_old = _callbacks(receiver, before)
        assert all(adapter.validate_callback(r["url"], r["form"], r["headers"]) for r in signed_old)

        sandbox.config(secondary_auth_token_promoted=True)  # step 3: the promotion, at Twilio
        twilio_settings.TWILIO_AUTH_TOKEN = sandbox.auth_token  # a host still on the old token is refused:
        [refused] = adapter.submit_many([Submission(message_id=2, to="+14155550103", body="x", sender=FROM)])
        assert refused.outcome == Outcome.REJECTED and refused.error_code == "20003", refused
        twilio_settings.TWILIO_AUTH_TOKEN = NEW  # hence step 2 on every host before step 3
        after = _send(adapter, receiver, "+14155550102")
        signed_new = _callbacks(receiver, after)
        assert all(adapter.validate_callback(r["url"], r["form"], r["headers"]) for r in signed_new)
        assert all(adapter.validate_callback(r["url"], r["form"], r["headers"]) for r in signed_old)

        twilio_settings.TWILIO_AUTH_TOKEN_PREVIOUS = ""  # step 4: the rotation is over
        assert not any(adapter.validate_callback(r["url"], r["form"], r["headers"]) for r in signed_old)
        assert all(adapter.validate_callback(r["url"], r["form"], r["headers"]) for r in signed_new)
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def _send(adapter, receiver, to: str) -> str:
    [result] = adapter.submit_many(
        [Submission(message_id=1, to=to, body="hello", sender=FROM, status_callback=receiver.url())]
    )
    assert result.outcome == Outcome.ACCEPTED, result
    return result.provider_message_id


def _callbacks(receiver, sid: str) -> list[dict]:
    # sent, then delivered (the sandbox's default final status)
    wait_for(lambda: len(receiver.by_sid().get(sid, [])) >= 2, 10, f"the callbacks of {sid}")
    return receiver.by_sid()[sid]
