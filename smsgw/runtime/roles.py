"""What each kind of process needs from its host's configuration, checked when it starts.

Settings that every process needs are checked when the settings load (config.settings, smsgw.config.security).
Some are needed only by one role, and a host that runs only that role is where they go missing: a send
worker on a host without ``SMSGW_PUBLIC_BASE_URL`` submits messages with no StatusCallback, so the
provider never reports back and every message stays ``sent`` with nothing logged. A web process needs it
too: a provider signs the public URL it calls (twilio.com/docs/usage/webhooks/webhooks-security), and
behind a proxy the URL Django sees is another one, so every genuine callback would fail its signature
check and be refused with a 4xx, which Twilio does not retry (webhooks-connection-overrides: ``rp``). In
production such a process refuses to start, naming the setting; elsewhere it starts and logs a warning."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from smsgw.runtime.queues import SEND_PREFIX

log = logging.getLogger(__name__)


def _public_base_url_problem() -> str | None:
    base = settings.SMSGW_PUBLIC_BASE_URL
    if not base:
        return (
            "SMSGW_PUBLIC_BASE_URL is not set: without it submissions carry no StatusCallback URL and "
            "no delivery receipt ever arrives (set it to the public origin of the web processes, e.g. "
            "https://sms.example.com)"
        )
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"SMSGW_PUBLIC_BASE_URL must be an absolute http(s) URL, got {base!r}"
    if settings.PRODUCTION and parts.scheme != "https" and settings.SMSGW_TLS != "off":
        return f"SMSGW_PUBLIC_BASE_URL must use https in production, got {base!r}"
    return None


def worker_problems(queues: Iterable[str]) -> list[str]:
    """Configuration problems of a Celery worker consuming ``queues``."""
    problems = []
    if any(q.startswith(SEND_PREFIX) for q in queues) and (problem := _public_base_url_problem()):
        problems.append(problem)
    return problems


def check_worker(queues: Iterable[str]) -> None:
    """Refuse to start a production worker whose role lacks a setting; warn elsewhere."""
    problems = worker_problems(list(queues))
    if not problems:
        return
    if settings.PRODUCTION:
        raise SystemExit(
            "smsgw worker refuses to start (SMSGW_ENV=production):\n  - " + "\n  - ".join(problems)
        )
    for problem in problems:
        log.warning("worker configuration: %s", problem)


def web_problems() -> list[str]:
    """Configuration problems of a web process (the API, and the provider callbacks it verifies)."""
    problem = _public_base_url_problem()
    return [problem] if problem else []


def send_concurrency_at_start(queues: Iterable[str], options: dict) -> str | None:
    """A send worker's requests in flight per process (smsgw.config.concurrency), settled before its pool
    forks (``celeryd_init``): when no setting says how many send processes share the account, a prefork
    worker counts its own (``--concurrency``), and its children inherit the result. Returns the line to
    log once logging is set up (``celeryd_after_setup``); None for a worker that does not send."""
    if not any(q.startswith(SEND_PREFIX) for q in queues):
        return None
    plan = settings.SEND_CONCURRENCY_PLAN
    pool = options.get("pool_cls") or "prefork"
    processes = options.get("concurrency")
    if plan.processes_assumed and pool == "prefork" and isinstance(processes, int) and processes > 0:
        plan = settings.SEND_CONCURRENCY_PLAN = plan.with_processes(processes, "this worker's --concurrency")
        settings.SEND_CONCURRENCY = plan.per_process
    return f"send concurrency: {plan.describe()}"


def check_web() -> None:
    """Refuse to start a production web process that could not verify a provider's callbacks; warn
    elsewhere. An exception rather than SystemExit: gunicorn halts when a worker fails to boot with one
    (its arbiter's WORKER_BOOT_ERROR), while a worker that merely exits is started again, for ever."""
    problems = web_problems()
    if not problems:
        return
    if settings.PRODUCTION:
        raise ImproperlyConfigured(
            "smsgw web refuses to start (SMSGW_ENV=production):\n  - " + "\n  - ".join(problems)
        )
    for problem in problems:
        log.warning("web configuration: %s", problem)


def queues_of(options: dict, conf) -> list[str]:
    """The queues a worker consumes: ``-Q`` as given, else Celery's default queue."""
    raw = options.get("queues") or []
    if isinstance(raw, str):
        raw = raw.split(",")
    names = [q.strip() for q in raw if q and q.strip()]
    return names or [conf.task_default_queue]
