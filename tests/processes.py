"""Integration-test glue over bench.harness.devprocs: processes pointed at pytest-django's test database."""

from __future__ import annotations

import contextlib
import os

from django.conf import settings
from django.db import connection

from bench.harness.devprocs import ALL_QUEUES, ROOT, Proc, celery_beat, celery_worker, free_port, stop_all

__all__ = [
    "ALL_QUEUES",
    "ROOT",
    "Proc",
    "broker_purge",
    "celery_beat",
    "celery_worker",
    "free_port",
    "process_env",
    "stop_all",
]


def database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return (
        f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )


def process_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        SMSGW_ENV=settings.SMSGW_ENV,
        PYTHONUNBUFFERED="1",
    )
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def broker_purge() -> None:
    """Empty the test broker so one test's leftovers never feed the next."""
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis"):
        import redis

        redis.Redis.from_url(url).flushdb()
    else:
        from config.celery import app

        with app.connection_for_write() as conn:
            for queue in ALL_QUEUES.split(","):
                # A queue that does not exist yet has nothing to purge.
                with contextlib.suppress(Exception):
                    conn.default_channel.queue_purge(queue)
