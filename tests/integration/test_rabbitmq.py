"""RabbitMQ as deployed from deploy/rabbitmq/definitions.json: the vhost, the smsgw user, durable quorum
task queues under the delivery-limit / dead-letter policy. Real worker and beat processes on it deliver
every message exactly once, the queues they use are the quorum queues the definitions declare (Celery
declares them with equivalent arguments), and publishing channels are in confirm mode."""

from __future__ import annotations

import fcntl
import json
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from scheduling.models import Message, Status
from tests.factories import recipient, tenant_with_key
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not shutil.which("rabbitmqctl"), reason="RabbitMQ is not installed here"),
]
ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = ROOT / "deploy" / "rabbitmq" / "definitions.json"
TASK_QUEUES = ("sweep", "send.transactional", "send.bulk", "receipts", "webhooks", "reconcile", "default")


def _ctl(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        ["rabbitmqctl", "-q", *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


# The local RabbitMQ's smsgw vhost, user and queues are one broker-wide state: each test here holds this lock
# (one file for the machine, as the broker is one) from before its first fixture until after its last, so
# they run in the parallel group one at a time, whichever workers take them.
BROKER_LOCK = Path(tempfile.gettempdir()) / "smsgw-test-rabbitmq.lock"
BROKER_LOCK_WAIT_S = 240


@pytest.fixture(autouse=True)
def rabbit_broker_alone():
    """The broker-wide state to this test alone: autouse, so set up before the test's other fixtures (its
    pipeline's processes) and torn down after them."""
    with open(BROKER_LOCK, "a") as lock:

        def taken() -> bool:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        wait_for(taken, BROKER_LOCK_WAIT_S, f"the lock on the local RabbitMQ ({BROKER_LOCK})", interval=0.2)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def rabbit_url():
    """Load the shipped definitions into the local RabbitMQ, as an operator would, and give the
    passwordless smsgw user a password (docs/deploy.md: rabbitmqctl change_password)."""
    # On standard input: a path is read by the broker's own user, and the clone may live in a folder only
    # its owner can read (mktemp -d makes them 0700). No path argument: RabbitMQ 3.10's CLI (Debian 12)
    # takes "-" for a file name; without a path it reads standard input, in the --format given.
    _ctl("import_definitions", "--format", "json", stdin=DEFINITIONS.read_text())
    password = secrets.token_hex(12)
    _ctl("change_password", "smsgw", password)
    for q in TASK_QUEUES:
        _ctl("purge_queue", "-p", "smsgw", q)
    return f"amqp://smsgw:{password}@127.0.0.1:5672/smsgw"


def test_definitions_declare_quorum_task_queues_under_the_dead_letter_policy(rabbit_url):
    queues = {
        q["name"]: q
        for q in json.loads(
            _ctl("list_queues", "-p", "smsgw", "name", "type", "policy", "durable", "--formatter", "json")
        )
    }
    for name in (*TASK_QUEUES, "smsgw.dead"):
        assert queues[name]["type"] == "quorum" and queues[name]["durable"], queues.get(name)
    for name in TASK_QUEUES:
        assert queues[name]["policy"] == "smsgw-task-queues", queues[name]
    policy = json.loads(_ctl("list_policies", "-p", "smsgw", "--formatter", "json"))
    (task_policy,) = [p for p in policy if p["name"] == "smsgw-task-queues"]
    definition = task_policy["definition"]
    definition = json.loads(definition) if isinstance(definition, str) else definition
    assert definition["delivery-limit"] == 20 and definition["dead-letter-exchange"] == "smsgw.dead"


def test_messages_go_through_quorum_queues_with_publisher_confirms(pipeline, rabbit_url):
    pipeline.env["CELERY_BROKER_URL"] = rabbit_url
    pipeline.worker()
    pipeline.beat()
    _, key = tenant_with_key("rabbit")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    ids = []
    for i in range(20):
        r = api.post("/v1/messages", {"to": recipient(i), "body": f"rabbit {i}"}, format="json")
        assert r.status_code == 201, r.content
        ids.append(Message.objects.get(public_id=r.json()["id"]).pk)
    pipeline.wait_all_final(ids, timeout=90)
    assert set(Message.objects.filter(pk__in=ids).values_list("status", flat=True)) <= {
        Status.SENT,
        Status.DELIVERED,
    }
    by_to = pipeline.submissions_by_recipient()
    assert sorted(by_to) == sorted(recipient(i) for i in range(20)) and set(by_to.values()) == {1}
    # The worker's publishing channels (the sweep publishes send batches) are in confirm mode.
    channels = json.loads(_ctl("list_channels", "vhost", "confirm", "user", "--formatter", "json"))
    ours = [c for c in channels if c["vhost"] == "smsgw"]
    assert any(c["confirm"] for c in ours), ours
    queues = {
        q["name"]: q
        for q in json.loads(_ctl("list_queues", "-p", "smsgw", "name", "type", "--formatter", "json"))
    }
    assert {queues[q]["type"] for q in TASK_QUEUES} == {"quorum"}
