"""A worker checks at start-up the settings its role needs: a send worker without SMSGW_PUBLIC_BASE_URL
refuses to start in production (its messages would carry no StatusCallback) and warns elsewhere. So does
a web process (it could not verify the signature of a provider's callback behind a proxy)."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.production_env import production_env
from tests.sandbox_process import unused_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]
CELERY = str(Path(sys.executable).with_name("celery"))
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))


def _env(**overrides: str | None) -> dict[str, str]:
    return production_env(**{"CELERY_BROKER_URL": "redis://127.0.0.1:6379/15", **overrides})


def _worker(queues: str) -> list[str]:
    return [
        CELERY,
        "-A",
        "config",
        "worker",
        "-Q",
        queues,
        "-c",
        "1",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "-n",
        f"roles-{secrets.token_hex(3)}@%h",
    ]


@pytest.mark.parametrize(
    ("queues", "base", "named"),
    [
        ("send.transactional", None, "SMSGW_PUBLIC_BASE_URL is not set"),
        ("sweep,send.bulk", "", "SMSGW_PUBLIC_BASE_URL is not set"),
        ("send.bulk", "sms.example.com", "must be an absolute http(s) URL"),
        ("send.bulk", "http://sms.example.com", "must use https in production"),
    ],
)
def test_a_production_send_worker_without_a_callback_base_refuses_to_start(queues, base, named):
    env = _env(SMSGW_PUBLIC_BASE_URL=base)
    out = subprocess.run(_worker(queues), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "refuses to start" in out.stderr and named in out.stderr


def _starts(env: dict[str, str], queues: str, expect: str) -> str:
    """Start a worker, wait until its log shows ``expect`` (or it is ready), stop it; return the log."""
    log = Path(env["SMSGW_VAR_DIR"]) / f"roles-{secrets.token_hex(4)}.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(_worker(queues), cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: expect in log.read_text() or proc.poll() is not None, timeout=90, what=expect)
        assert proc.poll() is None, log.read_text()
        return log.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.integration
def test_workers_whose_role_needs_no_callback_base_start_without_it():
    env = _env(SMSGW_PUBLIC_BASE_URL=None, CELERY_BROKER_URL=settings.CELERY_BROKER_URL)
    text = _starts(env, "sweep,receipts,webhooks,reconcile", "ready.")
    assert "refuses to start" not in text


@pytest.mark.integration
def test_a_production_send_worker_with_its_settings_starts():
    env = _env(SMSGW_PUBLIC_BASE_URL="https://sms.example.com", CELERY_BROKER_URL=settings.CELERY_BROKER_URL)
    text = _starts(env, "send.transactional", "ready.")
    assert "worker configuration" not in text
    # Once at start, its requests in flight per process and where the number came from: nothing says how
    # many send processes share the account, so this worker counts its own (-c 1).
    assert (
        "send concurrency: 100 requests in flight per send process: 100 concurrent requests per provider "
        "account (the twilio provider's default) shared by 1 send process (this worker's --concurrency)"
    ) in text


@pytest.mark.integration
def test_outside_production_the_send_worker_starts_and_warns():
    env = _env(
        SMSGW_ENV="development", SMSGW_PUBLIC_BASE_URL=None, CELERY_BROKER_URL=settings.CELERY_BROKER_URL
    )
    text = _starts(env, "send.bulk", "ready.")
    assert "worker configuration: SMSGW_PUBLIC_BASE_URL is not set" in text


def _web() -> list[str]:
    # As deploy/Procfile starts it; the port is never listened on long (the worker fails to boot).
    return [
        GUNICORN,
        "config.wsgi",
        "--bind",
        f"127.0.0.1:{unused_port()}",
        "--workers",
        "1",
        "--no-control-socket",
    ]


@pytest.mark.parametrize(
    ("base", "named"),
    [
        (None, "SMSGW_PUBLIC_BASE_URL is not set"),
        ("", "SMSGW_PUBLIC_BASE_URL is not set"),
        ("sms.example.com", "must be an absolute http(s) URL"),
        ("http://sms.example.com", "must use https in production"),
    ],
)
def test_a_production_web_process_without_its_public_base_url_refuses_to_start(base, named):
    env = _env(SMSGW_PUBLIC_BASE_URL=base)
    out = subprocess.run(_web(), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0  # gunicorn halts (a worker that cannot boot), it does not restart it
    assert "smsgw web refuses to start" in out.stderr and named in out.stderr


def _load_web(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = "import config.wsgi; print('loaded')"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)


def test_a_production_web_process_with_its_public_base_url_loads():
    out = _load_web(_env(SMSGW_PUBLIC_BASE_URL="https://sms.example.com"))
    assert out.returncode == 0, out.stderr
    assert "loaded" in out.stdout and "web configuration" not in out.stderr


def test_outside_production_the_web_process_loads_and_warns():
    out = _load_web(_env(SMSGW_ENV="development", SMSGW_PUBLIC_BASE_URL=None))
    assert out.returncode == 0, out.stderr
    assert "web configuration: SMSGW_PUBLIC_BASE_URL is not set" in out.stderr
