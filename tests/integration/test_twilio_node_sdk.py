"""The official Twilio Node SDK (npm ``twilio``, pinned in tests/node/package.json) against a live
gunicorn: tests/node/facade.js, a Twilio program that changes only its credentials and base URL
(docs/coming-from-twilio.md), sends now, schedules with SendAt + ScheduleType=fixed, fetches, cancels and
gets a refusal. Real workers and beat send the first message through the Twilio sandbox. Skipped, saying
why, where Node or the SDK (``npm ci --prefix tests/node``, run by deploy/test.sh) is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from scheduling.facade.resources import public_id_of
from scheduling.models import Message, Status
from tests.factories import RECIPIENT, SENDER, sender_for, tenant_with_key
from tests.harness import start_web

NODE = shutil.which("node")
NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SERVICE = "MG" + "c" * 32
pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        NODE is None, reason="node is not installed: the Twilio Node SDK test needs Node.js 18 or later"
    ),
    pytest.mark.skipif(
        not (NODE_DIR / "node_modules" / "twilio").is_dir(),
        reason="the Twilio Node SDK is not installed: run npm ci --prefix tests/node",
    ),
]


def _run_facade_js(base: str, account_sid: str, key: str) -> dict:
    # Without TWILIO_EDGE / TWILIO_REGION, with which the SDK would rewrite smsgw's host (facade.js).
    env = {k: v for k, v in os.environ.items() if k not in ("TWILIO_EDGE", "TWILIO_REGION")}
    args = [str(NODE), str(NODE_DIR / "facade.js"), base, account_sid, key, RECIPIENT, SENDER, SERVICE]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"facade.js failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    return json.loads(done.stdout)


def _v1_message(base: str, key: str, sid: str) -> dict:
    request = urllib.request.Request(f"{base}/v1/messages/{sid}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)


def test_a_twilio_node_program_sends_schedules_fetches_and_cancels(pipeline):
    tenant, key = tenant_with_key("acme", allowed_countries=["US"])
    sender_for(tenant, SERVICE)  # the Messaging Service it schedules through is the tenant's
    base = start_web(pipeline)
    pipeline.worker()
    pipeline.beat()
    started = timezone.now()

    got = _run_facade_js(base, tenant.facade_account_sid, key)

    sent, scheduled = got["sent"], got["scheduled"]
    assert sent["sid"].startswith("SM") and len(sent["sid"]) == 34
    assert sent["accountSid"] == tenant.facade_account_sid
    assert (sent["status"], sent["to"], sent["from"]) == ("queued", RECIPIENT, SENDER)
    assert scheduled["status"] == "scheduled" and scheduled["messagingServiceSid"] == SERVICE
    assert got["fetched"]["sid"] == scheduled["sid"] and got["fetched"]["status"] == "scheduled"
    assert got["canceled"]["status"] == "canceled"
    assert got["error"]["code"] == 21211 and got["error"]["status"] == 400

    # Both are ordinary smsgw messages; the refusal stored nothing.
    stored = {m.public_id: m for m in Message.objects.all()}
    assert set(stored) == {public_id_of(sent["sid"]), public_id_of(scheduled["sid"])}
    later = stored[public_id_of(scheduled["sid"])]
    assert later.status == Status.CANCELLED
    # SendAt went over as the SDK serialises a Date (whole seconds, UTC): about two hours ahead.
    send_at = datetime.fromisoformat(got["sendAt"])
    assert abs((later.due_at - send_at).total_seconds()) < 1
    assert timedelta(hours=1, minutes=59) < later.due_at - started < timedelta(hours=2, minutes=1)
    assert _v1_message(base, key, scheduled["sid"])["status"] == "cancelled"

    # The one sent now reaches the sandbox provider and its receipt comes back.
    now_id = public_id_of(sent["sid"])

    def delivered() -> bool:
        return Message.objects.get(public_id=now_id).status == Status.DELIVERED

    pipeline.wait_until(delivered, 90, "the message sent now through the Node SDK delivered")
    message = Message.objects.get(public_id=now_id)
    at_provider = {m.sid: m for m in pipeline.sandbox.list_messages(to=RECIPIENT)}
    assert message.provider_message_id in at_provider, at_provider
    assert at_provider[message.provider_message_id].status in ("sent", "delivered")
    assert at_provider[message.provider_message_id].body == "node: your code is 1234"
    on_v1 = _v1_message(base, key, sent["sid"])
    assert on_v1["id"] == now_id and on_v1["status"] == "delivered"
    assert on_v1["provider_message_id"] == message.provider_message_id
