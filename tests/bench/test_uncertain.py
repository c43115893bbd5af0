"""``python -m bench uncertain``: its options (defaults: the fault modes in docs/benchmarks.md, "Stored
but unanswered, and a lagging list") and the figures it derives from the timeline (the timed run itself
needs PostgreSQL, a broker and the sandbox)."""

from bench.command import Command
from bench.scenarios.uncertain import _label, spread, summary_lines


def _parse(*argv: str):
    return Command().create_parser("python -m", "bench").parse_args(["uncertain", *argv])


def test_defaults_are_the_documented_fault_modes_and_production_reconcile_settings():
    opts = _parse()
    assert opts.messages == 20_000
    assert (opts.store_then_500, opts.store_then_503, opts.answers_lost) == (0.01, 0.0, 0.005)
    assert opts.absent == 0.005
    assert opts.accept_then_hang == 0.0
    assert (opts.list_lag, opts.queue_delay_ms) == (120.0, 60_000)
    assert opts.callbacks is True
    assert opts.fault_free is True
    assert (opts.client_timeout, opts.first_look, opts.absent_grace, opts.reconcile_list_lag) == (
        10.0,
        10,
        30,
        150,
    )


def test_the_earlier_option_names_still_set_the_hung_accepts_and_the_never_stored():
    opts = _parse("--share", "0.01", "--lost-share", "0.002", "--no-callbacks", "--no-fault-free")
    assert opts.accept_then_hang == 0.01
    assert opts.absent == 0.002
    assert opts.callbacks is False
    assert opts.fault_free is False


def test_spread_is_nearest_rank():
    assert spread([]) == {"count": 0}
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert spread(values) == {"count": 10, "p50_s": 5.0, "p90_s": 9.0, "max_s": 10.0}
    assert spread([3.0]) == {"count": 1, "p50_s": 3.0, "p90_s": 3.0, "max_s": 3.0}


def test_labels_keep_the_designs_short_names_and_cut_sentences():
    assert _label("list") == "list"
    assert _label("list_lag_bound") == "list_lag_bound"
    assert _label(None) == "unspecified"
    assert len(_label("x" * 200)) == 40


def test_summary_names_duplicates_unresolved_and_both_resolutions():
    run = {
        "drain_s": 100.0,
        "all_sent": True,
        "sandbox_submissions": 10,
        "duplicates": 0,
        "recipients_submitted_twice": 0,
        "duplicate_submission_rows": 0,
        "uncertain_attempts": 2,
        "unresolved_uncertain": 0,
        "reconciled_ambiguous": 0,
        "resolution_found": {**spread([130.0]), "by_source": {"list": spread([130.0])}},
        "resolution_absent": {**spread([185.0]), "by_rule": {"list_lag_bound": spread([185.0])}},
    }
    result = {
        "messages": 10,
        "callbacks": "off",
        "faults": {"store_then_500_rate": 0.01},
        "provider": {"queue_delay_ms": 60000, "list_lag_seconds": 120.0},
        "reconcile_settings": {
            "TWILIO_TIMEOUT_SECONDS": "1.0",
            "SMSGW_RECONCILE_FIRST_LOOK_SECONDS": "10",
            "SMSGW_RECONCILE_ABSENT_GRACE_SECONDS": "30",
            "SMSGW_RECONCILE_LIST_LAG_SECONDS": "150",
            "absent_resend_bound_s": 181.0,
        },
        "fault_free": {**run, "drain_s": 10.0, "uncertain_attempts": 0},
        "faulted": run,
        "ratio_drain_faulted_to_fault_free": 10.0,
    }
    text = "\n".join(summary_lines(result))
    assert "absent resend bound 181.0 s" in text
    assert "duplicates 0" in text
    assert "unresolved 0" in text
    assert "source list: 1 (p50 130.0 s" in text
    assert "rule list_lag_bound: 1 (p50 185.0 s" in text
    assert "drain ratio faulted / fault-free: 10.0" in text
