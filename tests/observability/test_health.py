"""/healthz and /readyz: liveness of the process; readiness of the database and the broker, and sweep
liveness reported (and required with ?sweep=1)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.utils import timezone

from config.celery import app
from scheduling.dispatch import sweep
from smsgw.http import health
from smsgw.observability.models import Heartbeat

# SQLite half too: the embedded mode's readiness checks (SQLite, filesystem broker).
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def test_healthz_answers_without_the_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_checks_database_and_broker_and_reports_a_sweep_that_never_ran(client):
    body = client.get("/readyz").json()
    assert body["status"] == "ok" and body["broker"] == "ok" and body["database"]
    assert body["sweep"] == {"age_seconds": None, "stale": True}
    assert client.get("/readyz?sweep=1").status_code == 503, "a sweep that never ran is stale"


def test_readyz_with_sweep_follows_the_last_completed_pass(client, settings):
    settings.SWEEP_STALE_SECONDS = 30
    sweep.sweep_for(0.05)
    fresh = client.get("/readyz?sweep=1")
    assert fresh.status_code == 200 and fresh.json()["sweep"]["stale"] is False, fresh.json()  # says why
    assert 0 <= fresh.json()["sweep"]["age_seconds"] < 5
    Heartbeat.objects.filter(name="sweep").update(at=timezone.now() - timedelta(seconds=31))
    stale = client.get("/readyz?sweep=1")
    assert stale.status_code == 503 and stale.json()["sweep"]["stale"] is True
    assert client.get("/readyz").status_code == 200, "a stale sweep alone does not unready the web"


def test_readyz_is_unavailable_when_the_broker_cannot_be_reached(client):
    old = app.conf.broker_write_url
    app.conf.broker_write_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    try:
        response = client.get("/readyz")
    finally:
        app.conf.broker_write_url = old
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable" and response.json()["broker"] != "ok"


def test_a_readiness_probe_answered_503_writes_no_error_line(client, caplog):
    """A probe polls every few seconds; its 503 says why in its body (and /metrics), not in the log."""
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client.get("/readyz?sweep=1").status_code == 503
    assert not [r for r in caplog.records if r.name == "django.request"]


def test_a_burst_of_readiness_probes_asks_the_broker_once_per_interval(client, settings, monkeypatch):
    """/readyz is unauthenticated: 50 probes in a row open the broker's connection once, not 50 times.
    The real broker answers; the wrapper only counts the connections asked of it."""
    settings.READYZ_BROKER_SECONDS = 60
    opened = []
    real = app.connection_for_write

    def counted(*args, **kwargs):
        opened.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(app, "connection_for_write", counted)
    bodies = [client.get("/readyz").json() for _ in range(50)]
    assert all(b["status"] == "ok" and b["broker"] == "ok" for b in bodies)
    assert all("by_queue" in b["queues"] for b in bodies), "queue depths still reported"
    assert health.broker_check.checks == 1
    assert len(opened) <= 2, "one check: its connection and the queue depths' one"


def test_the_broker_is_asked_again_once_the_interval_has_passed(client, settings):
    settings.READYZ_BROKER_SECONDS = 0.2
    # Before the first check: the interval runs from that check, which may come at any point of the request.
    started = time.monotonic()
    client.get("/readyz")
    assert health.broker_check.checks == 1
    while health.broker_check.checks < 2 and time.monotonic() - started < 10:
        client.get("/readyz")
    assert health.broker_check.checks == 2
    assert time.monotonic() - started >= 0.2


def test_probes_arriving_together_wait_for_one_broker_check(settings):
    settings.READYZ_BROKER_SECONDS = 60
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: health.broker_check.answer(), range(32)))
    assert health.broker_check.checks == 1
    assert len({id(a) for a in answers}) == 1 and answers[0].error is None
