"""Every task of the app has a soft and a hard time limit (issue 37), and a periodic pass stops cleanly
at the soft one."""

from __future__ import annotations

import importlib
import importlib.util
import logging

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.apps import apps

from config.celery import app
from smsgw.runtime.task_limits import next_tick_goes_on

PROJECT_PACKAGES = (
    "scheduling.",
    "delivery.",
    "receipts.",
    "inbound.",
    "limits.",
    "smsgw.",
    "sandbox.",
    "retention.",
    "reporting.",
)


def project_tasks():
    # What app.autodiscover_tasks() imports in a worker: each installed app's tasks module.
    for config in apps.get_app_configs():
        if importlib.util.find_spec(f"{config.name}.tasks"):
            importlib.import_module(f"{config.name}.tasks")
    # The app's tasks: those its installed apps define (not Celery's own, nor a benchmark's no-op that
    # another test module may have registered in this process).
    packages = {config.name for config in apps.get_app_configs()}
    tasks = {
        name: task
        for name, task in app.tasks.items()
        if any(task.__module__ == p or task.__module__.startswith(f"{p}.") for p in packages)
        and not name.startswith("celery.")
    }
    assert tasks, "no task registered: autodiscovery found nothing"
    return tasks


def test_every_task_of_the_app_has_a_soft_and_a_hard_time_limit():
    tasks = project_tasks()
    assert all(name.startswith(PROJECT_PACKAGES) for name in tasks), sorted(tasks)
    for name, task in tasks.items():
        assert task.soft_time_limit, f"{name} has no soft time limit"
        assert task.time_limit, f"{name} has no hard time limit"
        assert 0 < task.soft_time_limit < task.time_limit, name


def test_each_task_has_its_own_line_in_the_limits_table(settings):
    # Not only the catch-all defaults: a new task must be sized to its work.
    assert set(project_tasks()) <= set(settings.CELERY_TASK_ANNOTATIONS)


def test_the_webhook_pass_outlasts_a_batch_of_deliveries_cut_at_their_deadline(settings):
    limits = settings.CELERY_TASK_ANNOTATIONS["receipts.deliver_webhooks"]
    assert limits["soft_time_limit"] > settings.WEBHOOK_TIMEOUT_SECONDS * (200 / 16)


def test_a_periodic_pass_stopped_at_its_soft_limit_ends_quietly(caplog):
    calls = []

    @next_tick_goes_on
    def tick() -> None:
        calls.append(1)
        raise SoftTimeLimitExceeded

    with caplog.at_level(logging.WARNING, logger="smsgw.runtime.task_limits"):
        assert tick() is None
    assert calls == [1]
    assert "stopped at its soft time limit" in caplog.text


def test_any_other_error_still_fails_the_pass():
    @next_tick_goes_on
    def tick() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        tick()
