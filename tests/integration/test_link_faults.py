"""A send worker and the sweeper on a host of their own lose the link to PostgreSQL and Redis in the middle
of a drain: a real cut (tests.integration.split_host), packets dropped in both directions, nothing refused
or closed. The worker notices within seconds while the link is still down, and once it is back the drain
finishes within seconds; every message ends `sent`, submitted once. The long tier cuts for 30 s with
production's socket settings; every run cuts for 15 s with the settings scaled with it. (Before: no socket
timeouts or keepalives; the workers noticed nothing and resumed only when TCP's retransmission backoff
next tried, 7-9 s after a 45-s cut came back and minutes after a longer one.)"""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from scheduling.models import Message, Status
from tests import processes
from tests.factories import messages_bulk, tenant_with_key
from tests.harness import handed_over
from tests.integration.split_host import SplitHost, split_host_unavailable

pytestmark = pytest.mark.integration

# Production's socket settings (config.settings), and the cut and notice deadline that go with them: every
# run. The long tier also runs the same settings scaled down by 2.5 (SMSGW_DB_TCP_USER_TIMEOUT_MS and the
# others), with the cut and the deadline scaled with them.
#
# How soon a worker notices the dead peer: a PostgreSQL query sent into the cut fails by TCP_USER_TIMEOUT
# (15 s), one waiting on its answer by keepalives (5 s idle, then probes every 2 s, given up at the 15-s
# user timeout); the error is logged once the cleanup's own reconnect has given up too (connect_timeout,
# 5 s): 20 s. 5 s more for a loaded machine. (A busy worker has stopped reading from the broker, its
# prefetch taken: it meets the dead Redis connection, given up by the same keepalives and
# TCP_USER_TIMEOUT, when it next consumes.) Scaled: 6 s, 2 s idle, 2 s to connect: 8 s, and 5 s more.
PRODUCTION = {"cut": 30, "notice_within": 25, "env": {}}
SCALED = {
    "cut": 15,
    "notice_within": 13,
    "env": {
        "SMSGW_DB_TCP_USER_TIMEOUT_MS": "6000",
        "SMSGW_DB_KEEPALIVE_IDLE": "2",
        "SMSGW_DB_CONNECT_TIMEOUT": "2",
        "SMSGW_BROKER_TCP_USER_TIMEOUT_MS": "6000",
    },
}
# After the link is back: a connection attempt begun just before gives up after connect_timeout (5 s),
# Celery waits its retry interval (2 s, growing by 2 s per failed attempt: at most 8 s after the ~4
# attempts a 30-s cut allows), and what is left of the drain (under 2 s, the provider is fast by then)
# follows. About 15 s (15-24 s measured on a loaded 2-core machine); the limit is the 30 s, at
# either scale.
# Without the socket options the worker waited for the next TCP retransmission (about 21 s after a 30-s
# cut, and more the longer the cut: minutes); and before kombu's Redis ack was made to free its prefetch
# slot on a failed ack (config.celery), a worker whose task ended during the cut never fetched again.
RECOVER_WITHIN = 30

DB_ERROR = re.compile(r"OperationalError|connection timeout expired|server closed the connection")


@pytest.fixture
def split_host():
    reason = split_host_unavailable()
    if reason:
        pytest.skip(reason)
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("the broker socket options under test are Redis's")
    host = SplitHost()
    try:
        yield host
    finally:
        host.close()


def _lines_since(proc: processes.Proc, offset: int, pattern: re.Pattern) -> list[str]:
    return [line for line in proc.log()[offset:].splitlines() if pattern.search(line)]


@pytest.mark.parametrize(
    "scale",
    [
        # Production's in every run: the scaled settings drained in 35 s (over the 30-s bound) twice in full
        # runs on a loaded machine, where production's had passed every run before; the scaled cut is the
        # long tier's until that is understood.
        pytest.param(SCALED, id="scaled", marks=[pytest.mark.long, pytest.mark.timeout(900)]),
        pytest.param(PRODUCTION, id="production"),
    ],
)
def test_send_workers_cut_off_from_database_and_broker_notice_it_and_recover_within_seconds(
    pipeline, split_host, scale
):
    """Production's settings and a 30-s cut (every run); the long tier, a 15-s cut with the socket
    settings scaled to it."""
    cut_seconds, notice_within = scale["cut"], scale["notice_within"]
    db = connection.settings_dict
    pg = split_host.link((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    broker = urlsplit(settings.CELERY_BROKER_URL)
    redis = split_host.link((broker.hostname or "127.0.0.1", broker.port or 6379))
    sandbox = urlsplit(pipeline.sandbox.base_url)
    provider = split_host.link((sandbox.hostname or "127.0.0.1", sandbox.port or 80))  # never cut
    pipeline.env.update(SMSGW_SEND_CONCURRENCY="10", SMSGW_SEND_BATCH_SIZE="20")
    far_env = {
        **pipeline.env,
        "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{pg.host}:{pg.port}/{db['NAME']}",
        "CELERY_BROKER_URL": broker._replace(netloc=f"{redis.host}:{redis.port}").geturl(),
        "TWILIO_API_BASE_URL": sandbox._replace(netloc=f"{provider.host}:{provider.port}").geturl(),
        **scale["env"],
    }
    # A slow provider first, so the cut lands mid-drain: one process, 10 in flight, 0.25 s each.
    pipeline.sandbox.config(latency_ms=250)
    tenant, _ = tenant_with_key("acme")
    n = 400
    pks = messages_bulk(tenant, n, due_at=timezone.now())
    connection.close()
    for name, queues in (("sweeper", "sweep"), ("sender", "send.transactional,send.bulk,reconcile")):
        pipeline.procs.append(
            processes.celery_worker(name, far_env, queues=queues, concurrency=1, wrap=split_host.wrap)
        )
    sender = pipeline.procs[-1]
    pipeline.beat()  # beat stays on this host, like the database and the broker
    rows = Message.objects.filter(pk__in=pks)
    pipeline.wait_until(lambda: rows.filter(status=Status.SENT).count() >= 40, 90, "the drain to start")

    offset = len(sender.log())
    pg.blackhole()
    redis.blackhole()
    cut = time.monotonic()
    sent_at_cut = rows.filter(status=Status.SENT).count()
    pipeline.sandbox.config(latency_ms=5)  # the rest drains in a moment once the link is back
    pipeline.wait_until(
        lambda: _lines_since(sender, offset, DB_ERROR), notice_within, "the send worker to notice the cut"
    )
    noticed_in = time.monotonic() - cut
    pipeline.wait_until(lambda: time.monotonic() - cut >= cut_seconds, cut_seconds + 5, "the cut to last")
    pg.restore()
    redis.restore()
    restored = time.monotonic()
    pipeline.wait_all_final(pks, timeout=RECOVER_WITHIN + 60)
    recovered_in = time.monotonic() - restored
    print(
        f"\nsent at the cut {sent_at_cut}/{n}; noticed {noticed_in:.1f} s after the cut; drained "
        f"{recovered_in:.1f} s after the link came back"
    )

    assert handed_over(rows.values_list("pk", flat=True)) == {Status.SENT: n}
    submitted = pipeline.submissions_by_recipient()
    assert len(submitted) == n and set(submitted.values()) == {1}, "each sent exactly once"
    assert sent_at_cut < n - 100, "the cut came mid-drain"
    assert recovered_in <= RECOVER_WITHIN, (
        f"drained {recovered_in:.1f} s after the link came back\n{sender.log()[offset:][-6000:]}"
    )
