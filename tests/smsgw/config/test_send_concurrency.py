"""The default of SMSGW_SEND_CONCURRENCY follows the provider account: each send process takes an equal
share of the account's concurrent-request limit (SMSGW_ACCOUNT_CONCURRENT_REQUESTS, by default the one
the provider declares) over SMSGW_SEND_PROCESSES; an explicit SMSGW_SEND_CONCURRENCY wins; a send worker
that nothing told how many processes share the account counts its own, and says where its number came
from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from smsgw.config import concurrency
from smsgw.config import providers as declarations
from smsgw.runtime import roles
from tests.production_env import production_env

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("explicit", "account_limit", "processes", "expected"),
    [
        (None, 100, 4, 25),  # Twilio's commonly cited default over deploy/systemd's 4 processes
        (None, 100, 3, 33),  # floor: together they stay within the limit
        (None, 100, 8, 12),
        (None, 100, 1, 100),
        (None, 10, 40, 1),  # never 0: more processes than the limit still send
        (
            None,
            10_000,
            1,
            concurrency.PER_PROCESS_CEILING,
        ),  # a large account: one process's pools stay bounded
        (None, None, 4, concurrency.PER_PROCESS_CEILING),  # no limit known: the old default
        (7, 100, 4, 7),  # explicit wins
        (500, 100, 4, 500),  # explicit wins even past the ceiling and the account
    ],
)
def test_per_process_limit(explicit, account_limit, processes, expected):
    assert concurrency.per_process_limit(explicit, account_limit, processes) == expected


def _clear(monkeypatch):
    for name in (
        "SMSGW_SEND_CONCURRENCY",
        "SMSGW_ACCOUNT_CONCURRENT_REQUESTS",
        "SMSGW_SEND_PROCESSES",
        "SMSGW_WORKER_CONCURRENCY",
    ):
        monkeypatch.delenv(name, raising=False)


def test_from_the_environment_each_input_says_where_it_came_from(monkeypatch):
    _clear(monkeypatch)
    plan = concurrency.from_env((100, "twilio"))
    assert (plan.per_process, plan.account_source, plan.processes, plan.processes_assumed) == (
        25,
        "the twilio provider's default",
        concurrency.ASSUMED_PROCESSES,
        True,
    )
    assert "25 requests in flight per send process: 100 concurrent" in plan.describe()

    monkeypatch.setenv("SMSGW_WORKER_CONCURRENCY", "2")  # deploy/systemd's processes per worker
    assert (concurrency.from_env((100, "twilio")).per_process, concurrency.from_env(None).per_process) == (
        50,
        250,
    )

    monkeypatch.setenv("SMSGW_SEND_PROCESSES", "16")  # all hosts: wins over this host's worker
    monkeypatch.setenv("SMSGW_ACCOUNT_CONCURRENT_REQUESTS", "400")  # wins over the provider's default
    plan = concurrency.from_env((100, "twilio"))
    assert (plan.per_process, plan.processes_source, plan.account_source) == (
        25,
        "SMSGW_SEND_PROCESSES",
        "SMSGW_ACCOUNT_CONCURRENT_REQUESTS",
    )
    assert concurrency.from_env(None).per_process == 25  # set, it applies to a provider declaring none

    monkeypatch.setenv("SMSGW_SEND_CONCURRENCY", "9")
    plan = concurrency.from_env((100, "twilio"))
    assert plan.per_process == 9 and plan.describe().endswith("(SMSGW_SEND_CONCURRENCY)")


def test_more_processes_than_the_limit_is_said():
    plan = concurrency.SendConcurrency(
        None, 10, "SMSGW_ACCOUNT_CONCURRENT_REQUESTS", 40, "SMSGW_SEND_PROCESSES"
    )
    assert plan.per_process == 1 and "together they may exceed it" in plan.describe()


def test_the_lowest_declared_limit_of_the_providers_in_use():
    declarations.declare(
        "low", declarations.Capabilities(), declarations.ProviderSettings({}, concurrent_requests=20)
    )
    declarations.declare("none", declarations.Capabilities(), declarations.ProviderSettings({}))
    try:
        assert declarations.concurrent_requests({"twilio"}) == (100, "twilio")
        assert declarations.concurrent_requests({"twilio", "low", "none"}) == (20, "low")
        assert declarations.concurrent_requests({"vonage", "none"}) is None
    finally:
        declarations.forget("low")
        declarations.forget("none")


def test_a_send_worker_that_was_not_told_counts_its_own_processes(settings):
    settings.SEND_CONCURRENCY_PLAN = concurrency.SendConcurrency(None, 100, "x", 4, "assumed")
    line = roles.send_concurrency_at_start(["send.bulk"], {"concurrency": 5, "pool_cls": "prefork"})
    assert settings.SEND_CONCURRENCY == 20
    assert line is not None and "shared by 5 send processes (this worker's --concurrency)" in line
    # Not a send worker: nothing changes, nothing to log.
    settings.SEND_CONCURRENCY_PLAN = concurrency.SendConcurrency(None, 100, "x", 4, "assumed")
    settings.SEND_CONCURRENCY = 25
    assert roles.send_concurrency_at_start(["sweep"], {"concurrency": 5}) is None
    assert settings.SEND_CONCURRENCY == 25
    # A thread pool is one process: its --concurrency counts threads, not processes.
    roles.send_concurrency_at_start(["send.bulk"], {"concurrency": 5, "pool_cls": "threads"})
    assert settings.SEND_CONCURRENCY == 25


def test_a_send_worker_told_how_many_processes_keeps_that(settings):
    settings.SEND_CONCURRENCY_PLAN = concurrency.SendConcurrency(None, 100, "x", 10, "SMSGW_SEND_PROCESSES")
    settings.SEND_CONCURRENCY = 10
    line = roles.send_concurrency_at_start(["send.transactional"], {"concurrency": 2})
    assert settings.SEND_CONCURRENCY == 10 and line is not None and "(SMSGW_SEND_PROCESSES)" in line


def _loaded(**overrides: str | None) -> str:
    env = production_env(**overrides)  # no SMSGW_ setting but these
    code = "import django; django.setup(); from django.conf import settings; print(settings.SEND_CONCURRENCY)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_settings_take_the_account_share_and_an_explicit_value_wins():
    assert _loaded(SMSGW_SEND_PROCESSES="8") == "12"  # the default provider's 100 over 8 processes
    assert _loaded(SMSGW_SEND_PROCESSES="8", SMSGW_SEND_CONCURRENCY="250") == "250"
