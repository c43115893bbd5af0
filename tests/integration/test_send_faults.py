"""Slow provider requests do not hold their batch: with real worker processes, a batch in which a few
requests time out or are accepted and never answered has every other message recorded `sent` as its
answer comes, while the slow ones are still waiting on the provider (before: the whole batch waited for
its slowest request, up to the request timeout)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

from delivery.models import AttemptOutcome
from scheduling.models import Message, Status
from tests.factories import messages_bulk, recipient, tenant_with_key
from tests.harness import handed_over

pytestmark = pytest.mark.integration

# The provider request timeout: far longer than the healthy messages take. Every run uses 15 s and 100
# messages; the long tier, production's 30 s and 200 messages. The slow recipients are the same share.
SCALES = [
    pytest.param(15, 100, id="15s-100"),
    pytest.param(30, 200, id="30s-200", marks=[pytest.mark.long, pytest.mark.timeout(900)]),
]


@pytest.mark.parametrize(("timeout", "n"), SCALES)
def test_a_hung_request_does_not_hold_the_rest_of_its_batch(pipeline, timeout, n):
    """One batch of n messages through one send process; a few requests time out (never stored) and a few
    are stored and never answered. Every healthy message is recorded `sent` within the timeout less 5 s, while
    the slow ones are still on the wire; the slow ones end by the timeout and reconciliation, each stored
    once. Every run: a 15-s timeout and 100 messages; the long tier: 30 s and 200."""
    pipeline.env.update(
        TWILIO_TIMEOUT_SECONDS=str(timeout),
        SMSGW_SENDING_LEASE_SECONDS=str(timeout + 30),
        SMSGW_SEND_BATCH_SIZE="250",
    )
    tenant, _ = tenant_with_key("acme")
    # never stored, never answered; and stored by the provider, never answered
    timeouts = {recipient(i * n // 200) for i in (3, 70, 150)}
    hung = {recipient(i * n // 200) for i in (40, 120)}
    rules = [{"to": to, "action": "timeout", "times": 1} for to in timeouts]
    rules += [{"to": to, "action": "accept_then_hang", "times": 1} for to in hung]
    pipeline.sandbox.config(rules=rules, timeout_hang_seconds=timeout + 10)
    pks = messages_bulk(tenant, n, due_at=timezone.now())
    connection.close()
    pipeline.worker("sweeper", queues="sweep", concurrency=1)
    pipeline.worker("sender", queues="send.transactional,send.bulk,reconcile", concurrency=1)
    pipeline.beat()
    slow = timeouts | hung
    healthy = Message.objects.filter(pk__in=pks).exclude(to__in=slow)
    # One send process, one batch of n: every healthy message is recorded long before the timeout.
    pipeline.wait_until(
        lambda: healthy.filter(status=Status.SENT).count() == n - len(slow), timeout - 5, "healthy ones sent"
    )
    slow_rows = Message.objects.filter(pk__in=pks, to__in=slow)
    # The slow requests are still on the wire: nothing is known of them yet, and they held nobody.
    assert Counter(slow_rows.values_list("status", flat=True)) == {Status.SENDING: len(slow)}
    assert all(m.attempts.get().outcome == AttemptOutcome.PENDING for m in slow_rows)
    for m in healthy:
        assert m.sent_at >= m.sending_at and (m.sent_at - m.sending_at).total_seconds() < timeout - 5
    submitted = pipeline.submissions_by_recipient()
    assert all(submitted[to] == 1 for to in healthy.values_list("to", flat=True))
    # The slow ones end by their timeout and reconciliation: the hung accepts are found at the provider,
    # the timed-out ones proven absent and sent again, once. Every message ends `sent`, stored once.
    pipeline.wait_all_final(pks, timeout=timeout + 120)
    assert handed_over(pks) == {Status.SENT: n}
    submitted = pipeline.submissions_by_recipient()
    assert len(submitted) == n and set(submitted.values()) == {1}
