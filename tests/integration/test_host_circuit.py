"""One sending host cut off from the provider while another reaches it (issue 22): two real send workers with
different SMSGW_HOST_ID, one of them reaching the sandbox through a proxy this test mutes (requests are
forwarded, and stored, but no answer comes back: read timeouts) and then closes (connections refused). The
account's circuit must never open (the healthy host goes on sending), the cut host's own circuit opens and
closes again, its uncertain submissions are reconciled while it is still cut off, and every message ends
sent exactly once at the provider."""

from __future__ import annotations

import time
from collections import Counter
from urllib.parse import urlsplit

import pytest
from django.db import connection, transaction
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome, ProviderCircuit, ProviderHostCircuit, SenderCapacity
from scheduling.models import Message, MessageEvent, Status
from smsgw.runtime.queues import ROUTED_QUEUES, SEND_BULK, SEND_TRANSACTIONAL
from tests import processes
from tests.factories import SENDER, messages_bulk, recipient, tenant_with_key
from tests.integration.db_proxy import DatabaseProxy

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PROVIDER = "twilio"
N = 400
EXTRA = 40
RATE = 20.0  # the sender's rate: 400 messages take 20 s, so the cut falls mid-stream
# While the cut host is refused, the healthy one must send at least this many (a quarter of the rate over
# 12 s): the cut lasts until it has, and until the cut host's effects are seen (see the test).
HEALTHY_DURING_CUT = 60
HOST_ENV = {
    # Five failures in a row open a circuit: the account's would open as easily if it heard of them.
    "SMSGW_CIRCUIT_STREAK_FAILURES": "5",
    "SMSGW_HOST_CIRCUIT_PROBE_SECONDS": "1",
    "SMSGW_HOST_CIRCUIT_PROBE_MAX_SECONDS": "3",
    "SMSGW_HOST_CIRCUIT_PARK_SECONDS": "1",
    "SMSGW_RECONCILE_LIST_LAG_SECONDS": "2",
}


def test_one_host_cut_off_opens_only_its_own_circuit_and_the_healthy_host_sends_everything_once(pipeline):
    sandbox = pipeline.sandbox
    sandbox.config(callbacks_enabled=False)
    split = urlsplit(sandbox.base_url)
    proxy = DatabaseProxy((split.hostname or "127.0.0.1", split.port or 80))
    pipeline.env.update(HOST_ENV)
    healthy = {**pipeline.env, "SMSGW_HOST_ID": "host-a"}
    cut = {**pipeline.env, "SMSGW_HOST_ID": "host-b", "TWILIO_API_BASE_URL": f"http://127.0.0.1:{proxy.port}"}
    sends = f"{SEND_TRANSACTIONAL},{SEND_BULK}"
    others = ",".join(q for q in ROUTED_QUEUES if q not in (SEND_TRANSACTIONAL, SEND_BULK))
    try:
        SenderCapacity.objects.create(
            provider=PROVIDER, account=sandbox.account_sid, sender=SENDER, segments_per_second=RATE
        )
        tenant, _ = tenant_with_key("acme")
        pks = messages_bulk(tenant, N, due_at=timezone.now())
        connection.close()
        # The sweep, the reconciler and the other ticks run on the healthy host (with the default
        # concurrency for those queues: the sweep, receipts and webhooks ticks each keep a process busy).
        pipeline.procs.append(processes.celery_worker("ops-a", healthy, queues=others))
        for name, env in (("send-a", healthy), ("send-b", cut)):
            pipeline.procs.append(processes.celery_worker(name, env, queues=sends, concurrency=2))
        pipeline.beat()

        def sent() -> int:
            return Message.objects.filter(pk__in=pks, status__in=(Status.SENT, Status.DELIVERED)).count()

        def host_b() -> ProviderHostCircuit | None:
            return ProviderHostCircuit.objects.filter(provider=PROVIDER, host="host-b").first()

        pipeline.wait_until(lambda: sent() >= 60, 60, "60 sent before the cut")
        assert sent() < N - 150, f"{sent()} already sent: the cut came too late to matter"

        def uncertain_from_mute() -> bool:  # a request written whose answer never came back
            return Attempt.objects.filter(
                message_id__in=pks,
                http_status__isnull=True,
                outcome__in=(AttemptOutcome.UNCERTAIN, AttemptOutcome.RECONCILED_FOUND),
            ).exists()

        proxy.mute()
        pipeline.wait_until(
            lambda: (row := host_b()) is not None and row.state == "open", 30, "host-b's circuit to open"
        )
        # The muted phase lasts until it made what it is for: an uncertain submission of the cut host.
        pipeline.wait_until(uncertain_from_mute, 30, "an uncertain submission from the muted host")
        proxy.refuse()
        refused_at = time.time()

        def cut_seen() -> bool:
            """The cut host handed work over, the healthy one sent meanwhile, and the reconciler found a
            muted submission: all while the cut lasts."""
            return (
                MessageEvent.objects.filter(message_id__in=pks, kind="host_unreachable").exists()
                and MessageEvent.objects.filter(message_id__in=pks, kind="reconciled_found").exists()
                and len(sandbox.submissions(refused_at)) >= HEALTHY_DURING_CUT
            )

        pipeline.wait_until(cut_seen, 60, "the cut's effects: hand-over, healthy sends, reconciliation")
        healthy_sends = len(sandbox.submissions(refused_at))
        cut_ended = time.time()
        proxy.up()
        # More traffic after the cut: the cut host's next batch carries its probe, whose answer closes its
        # circuit (an idle host has nothing to probe with, and nothing to lose by staying open).
        with transaction.atomic():
            extra = messages_bulk(tenant, EXTRA, due_at=timezone.now())[-EXTRA:]  # (it lists the tenant's)
            for i, pk in enumerate(extra):
                Message.objects.filter(pk=pk).update(to=recipient(N + i))
        pks += extra
        connection.close()
        pipeline.wait_until(
            lambda: (row := host_b()) is not None and row.state == "closed", 30, "host-b back"
        )
        pipeline.wait_all_final(pks, timeout=60)

        # Every message sent, exactly once at the provider, under the sid it records.
        msgs = list(Message.objects.filter(pk__in=pks))
        statuses = Counter(m.status for m in msgs)
        assert set(statuses) <= {Status.SENT, Status.DELIVERED}, statuses
        stored = sandbox.messages_json()
        per_to = Counter(m["to"] for m in stored)
        assert not {to: n for to, n in per_to.items() if n > 1}, "a message was submitted twice"
        sids = {m["to"]: m["sid"] for m in stored}
        wrong = [
            (
                m.pk,
                m.status,
                m.reason_code,
                m.provider_message_id,
                sids.get(m.to),
                list(m.attempts.values_list("outcome", "http_status", "provider_message_id")),
            )
            for m in msgs
            if sids.get(m.to) != m.provider_message_id
        ]
        assert not wrong, (
            f"{len(wrong)} messages are not at the provider under the sid they record: {wrong[:5]}; "
            f"{len(stored)} stored, stats {sandbox.stats()}"
        )

        # The account's circuit never opened: nothing waited as provider_unavailable.
        account = ProviderCircuit.objects.filter(provider=PROVIDER, account=sandbox.account_sid).first()
        assert account is not None and account.opened_at is None and account.state == "closed"
        assert not MessageEvent.objects.filter(message_id__in=pks, kind="provider_unavailable").exists()
        # The cut host's own circuit opened, probed, and closed; the healthy host's never opened.
        row = host_b()
        assert row is not None and row.opened_at is not None and row.probes >= 1 and row.state == "closed"
        a = ProviderHostCircuit.objects.get(provider=PROVIDER, host="host-a")
        assert a.opened_at is None and a.last_answer_at is not None
        parked = MessageEvent.objects.filter(message_id__in=pks, kind="host_unreachable")
        assert parked.exists() and {e.details["host"] for e in parked} == {"host-b"}

        # The healthy host kept sending while the other was refused (at least a quarter of the rate).
        assert healthy_sends >= HEALTHY_DURING_CUT, f"{healthy_sends} sent in {cut_ended - refused_at:.1f} s"

        # The cut host's uncertain submissions (written, never answered) were found at the provider by the
        # reconciler while that host was still cut off: no wait for its circuit.
        uncertain = list(
            Attempt.objects.filter(
                message_id__in=pks, http_status__isnull=True, outcome=AttemptOutcome.RECONCILED_FOUND
            )
        )
        assert uncertain, "no muted request was uncertain: the test proves nothing"
        found = {
            e.message_id: e.created_at
            for e in MessageEvent.objects.filter(
                message_id__in=[u.message_id for u in uncertain], kind="reconciled_found"
            )
        }
        waits = sorted((found[u.message_id] - u.started_at).total_seconds() for u in uncertain)
        assert min(found.values()).timestamp() < cut_ended, "reconciled only after the cut ended"
        # (The incident: about 130 s, behind an account circuit opened by the cut host. Here the
        # first look, the lease and a loaded test machine: 5 to 20 s.)
        assert waits[-1] <= 30, f"uncertain submissions waited {waits} s to be reconciled"
        print(
            f"host circuit: {len(uncertain)} uncertain reconciled in {waits[0]:.1f}-{waits[-1]:.1f} s, "
            f"{parked.count()} host_unreachable entries, {row.probes} probes, {healthy_sends} sent by the "
            f"healthy host in {cut_ended - refused_at:.1f} s of refusal"
        )
    finally:
        proxy.close()
        connection.close()
