"""Two-way messaging through real processes (docs/inbound.md): gunicorn takes the providers' signed inbound
webhooks, a real `celery worker` on the inbound and webhooks queues and a real `celery beat` work them out
and deliver the tenant's message.received to a real HTTP receiver. Each reply reaches the tenant's webhook
and /v1/inbound exactly once, whatever the provider repeats, in whatever order a long message's parts
come, and through a database outage during a burst."""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from django.db import connection
from standardwebhooks import Webhook
from twilio.request_validator import RequestValidator

from delivery.providers.vonage.sandbox.parts import signature
from inbound.models import InboundMessage
from tests.factories import SENDER, recipient, tenant_with_key
from tests.harness import start_web
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
VONAGE_SECRET = "integration-inbound-secret"
VONAGE_KEY = "abcd1234"
VONAGE_ENV = {
    "VONAGE_API_KEY": VONAGE_KEY,
    "VONAGE_SIGNATURE_SECRET": VONAGE_SECRET,
    "VONAGE_SIGNATURE_METHOD": "sha256",
}


def _post(url: str, data: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def twilio_reply(base: str, token: str, body: str, frm: str, *, sid: str | None = None) -> tuple[int, dict]:
    sid = sid or "SM" + secrets.token_hex(16)
    params = {
        "MessageSid": sid,
        "SmsMessageSid": sid,
        "AccountSid": "AC" + "0" * 32,
        "From": frm,
        "To": SENDER,
        "Body": body,
        "NumMedia": "0",
        "NumSegments": "1",
        "SmsStatus": "received",
        "ApiVersion": "2010-04-01",
    }
    url = f"{base}/inbound/twilio/"
    headers = {"X-Twilio-Signature": RequestValidator(token).compute_signature(url, params)}
    return _post(url, urllib.parse.urlencode(params).encode(), headers), params


def vonage_part(
    base: str, text: str, frm: str, *, message_id: str, part: int = 0, total: int = 0, ref: str = ""
) -> int:
    fields = {
        "msisdn": frm.lstrip("+"),
        "to": SENDER.lstrip("+"),
        "messageId": message_id,
        "text": text,
        "type": "text",
        "keyword": text.split()[0].upper(),
        "message-timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "api-key": VONAGE_KEY,
        "timestamp": str(int(time.time())),
        "nonce": secrets.token_hex(8),
    }
    if total:
        fields.update(
            {"concat": "true", "concat-ref": ref, "concat-total": str(total), "concat-part": str(part)}
        )
    fields["sig"] = signature(fields, VONAGE_SECRET, "sha256")
    return _post(f"{base}/inbound/vonage/", json.dumps(fields).encode(), {"Content-Type": "application/json"})


def listed(base: str, key: str) -> list[dict]:
    request = urllib.request.Request(
        f"{base}/v1/inbound?page_size=500", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)["results"]


def received(receiver, secret: str) -> list[dict]:
    """The message.received notifications the receiver got, each signature checked."""
    out = []
    for got in list(receiver.received):
        headers = {k: v for k, v in got["headers"].items() if k.startswith("webhook-")}
        Webhook(secret).verify(got["body"], headers)  # raises on a bad signature
        if got["json"]["type"] == "message.received":
            out.append({**got["json"]["data"], "webhook_id": got["headers"]["webhook-id"]})
    return out


@pytest.fixture
def tenant_hooked(settings):
    from receipts.webhooks import tenant_webhook_configure
    from tests.webhook_receiver import WebhookReceiver

    settings.WEBHOOK_ALLOW_PRIVATE = settings.WEBHOOK_ALLOW_HTTP = True  # the receiver is on loopback
    receiver = WebhookReceiver().start()
    tenant, key = tenant_with_key("acme")
    secret = tenant_webhook_configure(tenant=tenant, url=receiver.url, rotate_secret=True)
    yield tenant, key, receiver, secret
    receiver.stop()


def test_signed_twilio_and_vonage_replies_reach_the_webhook_and_the_api_once_each(pipeline, tenant_hooked):
    _tenant, key, receiver, secret = tenant_hooked
    base = start_web(pipeline, SMSGW_WEBHOOK_ALLOW_PRIVATE="1", SMSGW_WEBHOOK_ALLOW_HTTP="1", **VONAGE_ENV)
    pipeline.worker(queues="inbound,webhooks")
    pipeline.beat()
    token = pipeline.sandbox.auth_token
    # The same Twilio reply delivered five times (the provider's retries): one message.
    status, params = twilio_reply(base, token, "Yes, see you Tuesday", recipient(1))
    assert status == 200
    for _ in range(4):
        assert (
            twilio_reply(base, token, "Yes, see you Tuesday", recipient(1), sid=params["MessageSid"])[0]
            == 200
        )
    # Unsigned (wrong token): refused, nothing stored.
    assert twilio_reply(base, "the-wrong-token", "forged", recipient(1))[0] == 403
    # A three-part Vonage message whose parts come 3, 1, 2 (one of them twice).
    parts = {1: "Running late, ", 2: "will be there ", 3: "at ten."}
    ids = {n: secrets.token_hex(8).upper() for n in parts}
    for n in (3, 1, 1, 2):
        assert vonage_part(base, parts[n], recipient(2), message_id=ids[n], part=n, total=3, ref="1A") == 200

    wait_for(lambda: len(received(receiver, secret)) >= 2, 60, "two message.received webhooks")
    api = listed(base, key)
    assert sorted((r["from"], r["body"]) for r in api) == [
        (recipient(1), "Yes, see you Tuesday"),
        (recipient(2), "Running late, will be there at ten."),
    ]
    hooks = received(receiver, secret)
    assert sorted(h["id"] for h in hooks) == sorted(r["id"] for r in api)
    assert len({h["webhook_id"] for h in hooks}) == 2
    assert InboundMessage.objects.count() == 2


def test_database_stopped_during_an_inbound_burst_loses_nothing(pipeline, tenant_hooked, tmp_path):
    """The web process reaches PostgreSQL through a proxy the test cuts mid-burst: every signed reply is
    still answered 200 (spooled on disk); once the database is back each reaches the tenant once."""
    from tests.integration.db_proxy import DatabaseProxy

    if connection.vendor != "postgresql":
        pytest.skip("the outage is a TCP proxy in front of PostgreSQL")
    _tenant, key, receiver, secret = tenant_hooked
    db = connection.settings_dict
    proxy = DatabaseProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    spool_dir = tmp_path / "inbound-spool"
    pipeline.env["SMSGW_INBOUND_SPOOL_DIR"] = str(spool_dir)
    web_db = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
    base = start_web(
        pipeline,
        web_only={"DATABASE_URL": web_db},
        SMSGW_WEBHOOK_ALLOW_PRIVATE="1",
        SMSGW_WEBHOOK_ALLOW_HTTP="1",
        **VONAGE_ENV,
    )
    token = pipeline.sandbox.auth_token
    connection.close()
    try:
        sent: list[dict] = []
        for i in range(10):  # before the outage
            status, params = twilio_reply(base, token, f"before {i}", recipient(100 + i))
            assert status == 200
            sent.append(params)
        proxy.down()
        for i in range(30):  # during it: every one still answered 200, some repeated by the provider
            status, params = twilio_reply(base, token, f"during {i}", recipient(200 + i))
            assert status == 200, i
            sent.append(params)
            if i % 5 == 0:
                assert (
                    twilio_reply(base, token, params["Body"], params["From"], sid=params["MessageSid"])[0]
                    == 200
                )
        assert len(list(spool_dir.glob("*.json"))) >= 30
        proxy.up()
        pipeline.worker(queues="inbound,webhooks")
        pipeline.beat()
        wait_for(
            lambda: len(received(receiver, secret)) >= len(sent), 90, "every reply at the tenant's webhook"
        )
        pipeline.wait_until(lambda: not list(spool_dir.glob("*.json")), 60, "the spool drained")
        hooks = received(receiver, secret)
        assert sorted(h["body"] for h in hooks) == sorted(p["Body"] for p in sent)  # each once, none lost
        api = listed(base, key)
        assert sorted(r["body"] for r in api) == sorted(p["Body"] for p in sent)
        assert InboundMessage.objects.count() == len(sent)
    finally:
        proxy.close()
