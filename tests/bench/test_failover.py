"""``python -m bench failover``: its options, the figures it derives from both sandboxes' records, and
(integration) the scenario itself at tiny scale: 300 routed messages and a 5-s outage, to prove it runs
and prints its figures (the timed run is ``python -m bench failover``, docs/benchmarks.md)."""

import pytest

from bench.command import Command
from bench.scenarios.failover import duplicates, nearest_rank, returned, summary_lines, windows


def _parse(*argv: str):
    return Command().create_parser("python -m", "bench").parse_args(["failover", *argv])


def test_defaults_are_the_issues_benchmark():
    opts = _parse()
    assert (opts.messages, opts.rate, opts.outage_seconds) == (20_000, 500.0, 30.0)
    assert opts.outage_at == 0.125  # 30 s centred in 40 s of due times
    assert opts.reconcile_list_lag == 5
    assert opts.concurrency == 3


def test_windows_count_both_providers_and_split_at_the_outage():
    handed = [(0.5, "twilio"), (1.5, "twilio"), (2.5, "vonage"), (3.5, "vonage"), (4.0, "twilio")]
    out = windows(handed, first_due=0.0, down_at=2.0, up_at=3.0)
    assert out["before"] == {
        "seconds": 2.0,
        "submissions": 2,
        "per_s": 1.0,
        "by_provider": {"twilio": 2, "vonage": 0},
    }
    assert out["during"]["submissions"] == 1 and out["during"]["by_provider"]["vonage"] == 1
    # The after window ends at the last submission, which it counts.
    assert out["after"]["submissions"] == 2 and out["after"]["seconds"] == 1.0


def test_duplicates_count_a_recipient_at_both_providers_or_twice_at_one():
    twilio = ["+14152000000", "+14152000001", "+14152000001"]
    vonage = ["14152000000", "14152000002"]  # Vonage's numbers come without the plus
    out = duplicates(twilio, vonage)
    assert out["extra_submissions"] == 2
    assert out["recipients_at_both"] == 1
    assert out["recipients_twice_at_primary"] == 1
    assert out["recipients_twice_at_standby"] == 0
    assert duplicates(["+14152000000"], ["14152000001"])["extra_submissions"] == 0


def test_returned_gives_each_providers_submissions_per_bucket_after_recovery():
    handed = [(9.0, "vonage"), (10.5, "vonage"), (14.0, "twilio"), (16.0, "twilio")]
    assert returned(handed, up_at=10.0, bucket=5.0) == [[0, 1, 1], [5, 1, 0]]
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert nearest_rank([], 0.99) is None


def _result(**over) -> dict:
    result = {
        "messages": 300,
        "rate_per_s": 100.0,
        "outage_seconds": 5.0,
        "outage_from_first_due_s": 0.4,
        "requests_answered_503": 12,
        "settings": {
            "SMSGW_RECONCILE_LIST_LAG_SECONDS": "5",
            "SMSGW_RECONCILE_FIRST_LOOK_SECONDS": "10",
            "SMSGW_RECONCILE_ABSENT_GRACE_SECONDS": "30",
            "concurrency": 3,
        },
        "throughput": windows([(0.1, "twilio"), (1.0, "vonage"), (6.0, "twilio")], 0.0, 0.5, 5.5),
        "first_503_to_first_standby_s": 0.9,
        "outage_start_to_first_standby_s": 1.1,
        "duplicates": 0,
        "failed": 0,
        "left_in_pipeline": 0,
        "lag_during_outage": {"due_during": 1, "p50_s": 1.0, "p99_s": 1.0, "max_s": 1.0},
        "lag_all": {"count": 3, "p50_s": 0.5, "p99_s": 1.0, "max_s": 1.0},
        "submissions_by_provider": {"twilio": 2, "vonage": 1},
        "primary_share_after_recovery": 1.0,
        "primary_return_after_recovery_s": 0.5,
        "after_recovery_by_15s": [[0, 1, 0]],
        "failover_events_by_why": {"circuit_open": 1},
        "reconcile_events": {},
        "troubled_messages": [],
    }
    result.update(over)
    return result


def test_summary_prints_every_figure_the_issue_asks_for():
    text = "\n".join(summary_lines(_result()))
    for needle in (
        "before ",
        "during ",
        "after ",
        "first 503 -> first vonage submission: 0.9 s",
        "duplicates across both providers: 0 (target 0)",
        "failed: 0 (target 0)",
        "due during the outage (1): p50 1.0 s, p99 1.0 s",
        "by provider: twilio 2, vonage 1",
        "twilio share 1.0",
    ):
        assert needle in text, needle


def test_summary_lists_a_troubled_messages_timeline():
    troubled = {
        "public_id": "msg_x",
        "to": "+1415200****",
        "status": "failed",
        "provider": "vonage",
        "route_leg": 1,
        "timeline": ["created", "failover(circuit_open)", "failed"],
    }
    text = "\n".join(summary_lines(_result(failed=1, troubled_messages=[troubled])))
    assert "! msg_x +1415200**** failed on vonage: created > failover(circuit_open) > failed" in text


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
# The long tier's: in two of five full runs on a loaded machine 141 and 186 messages were still in the
# pipeline at its 90-s deadline, none lost, none twice (the cause is not found yet: its report shows
# thousands of inconclusive look-ups after Twilio recovered). Every run checks the same guarantee with real
# processes in tests/integration/test_failover.py (Twilio 503 mid-burst: each message once, at Vonage).
@pytest.mark.long
@pytest.mark.timeout(600)
def test_the_scenario_runs_at_tiny_scale_and_prints_its_figures(capsys):
    from django.db import connection

    from bench.scenarios.failover import failover
    from tests.harness import fast_env
    from tests.processes import broker_purge, process_env

    if connection.vendor != "postgresql":
        pytest.skip("the benchmark runs on PostgreSQL")
    broker_purge()
    # The workers on this test's database and broker, with the integration tests' short windows.
    env = {k: v for k, v in process_env(**fast_env()).items() if k in ("DATABASE_URL", "CELERY_BROKER_URL")}
    result = failover(
        n=300,
        rate=100.0,
        outage_at=0.1,
        outage_seconds=5.0,
        concurrency=2,
        timeout=90.0,
        reconcile_list_lag=2,
        lead_seconds=5.0,
        env={**fast_env(), **env},
    )
    out = capsys.readouterr().out
    assert "== bench failover: 300 messages" in out
    assert "first 503 -> first vonage submission" in out
    # The bench's own report (its figures and the timelines of troubled messages) when it fails.
    assert result["left_in_pipeline"] == 0, out
    assert result["duplicates"] == 0 and result["failed"] == 0
    assert sum(result["submissions_by_provider"].values()) == 300
    assert result["submissions_by_provider"]["vonage"] > 0
