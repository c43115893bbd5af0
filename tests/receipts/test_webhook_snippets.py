"""The signature-verification snippets of docs/webhooks.md, taken from the page itself (so the page and this
test cannot drift) and run with their own interpreters (python, node, perl) against a delivery the gateway
really signed and POSTed: each accepts it, and refuses a tampered body, signature or secret and a stale
timestamp."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from receipts.webhooks import webhook_secret_new, webhook_sign, webhooks_deliver_due
from scheduling.lifecycle import transitions
from scheduling.models import Status
from tests.factories import message, tenant_with_key
from tests.webhook_receiver import WebhookReceiver

PAGE = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
RUN_SECONDS = 30  # a deadline for one interpreter's run, not a pause

# Appended to each snippet: read the secret, the three headers and the body's file from the arguments,
# print whether verify() accepts them.
HARNESS = {
    "python": (
        "py",
        [sys.executable],
        """
import sys
secret, msg_id, ts, sig, path = sys.argv[1:]
with open(path, "rb") as f:
    body = f.read()
headers = {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": sig}
print("valid" if verify(secret, headers, body) else "invalid")
""",
    ),
    "js": (
        "cjs",
        ["node"],
        """
const [secret, id, ts, sig, path] = process.argv.slice(2);
const body = require("node:fs").readFileSync(path);
const headers = {"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig};
console.log(verify(secret, headers, body) ? "valid" : "invalid");
""",
    ),
    "perl": (
        "pl",
        ["perl"],
        """
my ($secret, $id, $ts, $sig, $path) = @ARGV;
open my $fh, '<:raw', $path or die "cannot read $path";
my $body = do { local $/; <$fh> };
my %headers = ('webhook-id' => $id, 'webhook-timestamp' => $ts, 'webhook-signature' => $sig);
print verify($secret, \\%headers, $body) ? "valid\\n" : "invalid\\n";
""",
    ),
}


def snippet(language: str) -> str:
    """The first fenced block in ``language`` of the page's "Verifying the signature" section."""
    text = PAGE.read_text()
    section = text.split("## Verifying the signature", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(rf"^```{language}\n(.*?)^```", section, flags=re.M | re.S)
    assert blocks, f"docs/webhooks.md has no {language} snippet under 'Verifying the signature'"
    return blocks[0]


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("snippets")
    out = {}
    for language, (suffix, command, harness) in HARNESS.items():
        path = folder / f"verify.{suffix}"
        path.write_text(snippet(language) + "\n" + harness)
        out[language] = [*command, str(path)]
    return out


@pytest.fixture
def delivered(settings, tmp_path):
    """A real delivery: a status change's outbox row, signed and POSTed by the sender to a local receiver.
    (secret, headers, body file)."""
    settings.WEBHOOK_ALLOW_PRIVATE = settings.WEBHOOK_ALLOW_HTTP = True
    tenant, _ = tenant_with_key("acme")
    receiver = WebhookReceiver().start()
    try:
        tenant.webhook_url, tenant.webhook_secret = receiver.url, webhook_secret_new()
        tenant.save(update_fields=["webhook_url", "webhook_secret"])
        msg = message(tenant)
        transitions.transition(
            msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
        )
        assert webhooks_deliver_due() == 1
        [got] = receiver.received
    finally:
        receiver.stop()
    body = tmp_path / "body"
    body.write_bytes(got["body"].encode())
    return tenant.webhook_secret, got["headers"], body


def run(command: list[str], secret: str, headers: dict, body: Path) -> str:
    args = [
        secret,
        headers["webhook-id"],
        headers["webhook-timestamp"],
        headers["webhook-signature"],
        str(body),
    ]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=RUN_SECONDS, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.django_db
@pytest.mark.parametrize("language", list(HARNESS))
def test_each_documented_snippet_accepts_a_real_delivery_and_refuses_a_tampered_one(
    language, programs, delivered, tmp_path
):
    command = programs[language]
    secret, headers, body = delivered
    assert run(command, secret, headers, body) == "valid"

    tampered = tmp_path / "tampered"
    tampered.write_bytes(body.read_bytes().replace(b'"queued"', b'"delivered"', 1))
    assert tampered.read_bytes() != body.read_bytes()
    assert run(command, secret, headers, tampered) == "invalid"

    version, signature = headers["webhook-signature"].split(",", 1)
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    assert run(command, secret, {**headers, "webhook-signature": f"{version},{flipped}"}, body) == "invalid"
    assert run(command, webhook_secret_new(), headers, body) == "invalid"
    assert run(command, secret, {**headers, "webhook-id": headers["webhook-id"] + "x"}, body) == "invalid"

    # Signed by the gateway's own code, but ten minutes ago: a replayed request.
    old = timezone.now() - timedelta(minutes=10)
    stale_signature = webhook_sign(secret, headers["webhook-id"], old, body.read_text())
    stale = {**headers, "webhook-timestamp": str(int(old.timestamp())), "webhook-signature": stale_signature}
    assert run(command, secret, stale, body) == "invalid"

    # During a rotation the header may carry several signatures: one good one is enough.
    several = {**headers, "webhook-signature": f"v1,{flipped} {headers['webhook-signature']}"}
    assert run(command, secret, several, body) == "valid"
