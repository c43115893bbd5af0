"""``python -m bench facade``: its options (those of ``bench ingest``, so the two compare), the figures it
derives from each side's runs, and (integration) the scenario itself at tiny scale, to prove it drives
both APIs through gunicorn and prints its figures (the timed run is ``python -m bench facade``,
docs/benchmarks.md)."""

import base64

import pytest

from bench.command import Command
from bench.scenarios.facade import basic_credential, ratio, side_summary, summary_lines


def _parse(*argv: str):
    return Command().create_parser("python -m", "bench").parse_args(list(argv))


def test_defaults_are_bench_ingests_client_and_server_settings():
    fac, ingest = _parse("facade"), _parse("ingest")
    for name in ("seconds", "concurrency", "web_workers", "threads"):
        assert getattr(fac, name) == getattr(ingest, name), name
    assert fac.rounds == 2


def test_basic_credential_is_the_account_sid_and_the_key_as_twilios_sdks_send_them():
    raw = base64.b64decode(basic_credential("AC" + "0" * 32, "sk_abcd_secret")).decode()
    assert raw == "AC" + "0" * 32 + ":sk_abcd_secret"


def _run(requests, elapsed, codes, p50=10.0, p99=20.0):
    return {"requests": requests, "elapsed": elapsed, "codes": codes, "p50_ms": p50, "p99_ms": p99}


def test_side_summary_counts_non_2xx_over_runs_and_stored_against_2xx():
    runs = [_run(100, 2.0, {201: 98, 429: 2}), _run(300, 2.0, {"201": 300}, p50=12.5, p99=30.0)]
    out = side_summary(runs, stored=410)
    assert out["requests_per_s"] == 100.0
    assert out["status_codes"] == {201: 398, 429: 2}
    assert out["non_2xx"] == 2
    assert (out["answered_2xx"], out["stored"], out["stored_minus_2xx"]) == (398, 410, 12)
    assert out["latency_ms_p50_per_run"] == [10.0, 12.5]
    assert out["latency_ms_p99_per_run"] == [20.0, 30.0]
    assert out["per_run_requests_per_s"] == [50.0, 150.0]


def test_ratio_is_facade_rate_over_v1_rate_and_the_summary_prints_it():
    result = {
        "rounds": 1,
        "seconds_per_run": 1,
        "client": "wrk",
        "client_concurrency": 2,
        "worker_class": "gthread",
        "web_workers": 1,
        "threads": 1,
        "v1": side_summary([_run(200, 2.0, {201: 200})], stored=200),
        "facade": side_summary([_run(180, 2.0, {201: 179, 400: 1})], stored=179),
    }
    result["ratio_facade_to_v1"] = ratio(result)
    assert result["ratio_facade_to_v1"] == 0.9
    text = "\n".join(summary_lines(result))
    assert "v1: 100.0 req/s (200 in 2.0 s), p50 10 ms, p99 20 ms, non-2xx 0" in text
    assert "facade: 90.0 req/s" in text and "non-2xx 1" in text
    assert "ratio facade / v1: 0.9 (target >= 0.9)" in text


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_scenario_runs_at_tiny_scale_and_prints_its_figures(capsys):
    from django.db import connection

    from bench.scenarios.facade import facade
    from tests.processes import process_env

    if connection.vendor != "postgresql":
        pytest.skip("the benchmark runs on PostgreSQL")
    result = facade(seconds=1, concurrency=2, web_workers=1, threads=1, rounds=1, env=process_env())
    out = capsys.readouterr().out
    assert "== bench facade: 1 round(s) of 1 s per side" in out
    assert "ratio facade / v1:" in out
    for side in ("v1", "facade"):
        figures = result[side]
        assert figures["requests"] > 0 and figures["non_2xx"] == 0, figures
        assert set(figures["status_codes"]) == {201}
        # wrk may leave one request per connection unanswered at its deadline, stored nonetheless.
        assert 0 <= figures["stored_minus_2xx"] <= 2, figures
    assert result["ratio_facade_to_v1"] is not None
