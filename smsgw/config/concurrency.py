"""How many provider requests one send process may have in flight (``SMSGW_SEND_CONCURRENCY``).

A provider may limit the requests one account has in progress at once, over all its clients; past it
requests are refused. Every send process of every host that uses the account shares that limit, so
unless ``SMSGW_SEND_CONCURRENCY`` is set, each process takes an equal share of it:

    per process = max(1, floor(account limit / send processes)), at most ``PER_PROCESS_CEILING``

* the account limit is ``SMSGW_ACCOUNT_CONCURRENT_REQUESTS``, by default the lowest limit declared by
  the providers this deployment sends through (``ProviderSettings.concurrent_requests``);
* the send processes are ``SMSGW_SEND_PROCESSES`` (all hosts), by default this host's worker processes:
  ``SMSGW_WORKER_CONCURRENCY`` (deploy/systemd), or a send worker's own ``--concurrency`` when it starts
  (``smsgw.runtime.roles``), else ``ASSUMED_PROCESSES``.

With no account limit declared or set, the default stays ``PER_PROCESS_CEILING``. Paced submissions wait
for their slot outside this bound (``delivery.sending.inflight``); the adapters' connection pools, sized
by the same number, bound them on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from smsgw.config.env import env_int, env_is_set

# The per-process default before it followed the account; a derived default never exceeds it (one
# process's thread and connection pools are this size).
PER_PROCESS_CEILING = 250
# Send processes assumed when nothing says how many there are: deploy/systemd's and deploy/embedded.py's
# worker concurrency.
ASSUMED_PROCESSES = 4


def per_process_limit(
    explicit: int | None, account_limit: int | None, processes: int, ceiling: int = PER_PROCESS_CEILING
) -> int:
    """Requests in flight per send process: ``explicit`` when given, else an equal share of the account's
    limit over ``processes`` (at least 1, at most ``ceiling``), else ``ceiling``."""
    if explicit is not None:
        return explicit
    if account_limit is None:
        return ceiling
    return max(1, min(ceiling, account_limit // max(processes, 1)))


@dataclass(frozen=True)
class SendConcurrency:
    """The inputs of ``per_process_limit`` and where each came from (logged when a send worker starts)."""

    explicit: int | None  # SMSGW_SEND_CONCURRENCY, when set
    account_limit: int | None
    account_source: str
    processes: int
    processes_source: str

    @property
    def per_process(self) -> int:
        return per_process_limit(self.explicit, self.account_limit, self.processes)

    @property
    def processes_assumed(self) -> bool:
        """No setting said how many send processes there are (a worker may then count its own)."""
        return self.processes_source == "assumed"

    def with_processes(self, processes: int, source: str) -> SendConcurrency:
        return replace(self, processes=max(processes, 1), processes_source=source)

    def describe(self) -> str:
        if self.explicit is not None:
            return f"{self.explicit} requests in flight per send process (SMSGW_SEND_CONCURRENCY)"
        if self.account_limit is None:
            return (
                f"{self.per_process} requests in flight per send process (the default: no provider in use "
                "declares a concurrent-request limit and SMSGW_ACCOUNT_CONCURRENT_REQUESTS is not set)"
            )
        return (
            f"{self.per_process} requests in flight per send process: {self.account_limit} concurrent "
            f"requests per provider account ({self.account_source}) shared by {self.processes} send "
            f"process{'es' if self.processes != 1 else ''} ({self.processes_source}); set "
            "SMSGW_SEND_PROCESSES to the send processes of all "
            "hosts using the account, or SMSGW_SEND_CONCURRENCY"
            + (
                " (more send processes than the account's limit: together they may exceed it)"
                if self.processes > self.account_limit
                else ""
            )
        )


def from_env(declared: tuple[int, str] | None) -> SendConcurrency:
    """The settings' inputs: ``declared`` is the lowest limit the providers in use declare, and the
    provider declaring it (``smsgw.config.providers.concurrent_requests``)."""
    # The provider account's limit on requests in progress at once, over all its clients (default: the
    # lowest one the providers in use declare).
    if env_is_set("SMSGW_ACCOUNT_CONCURRENT_REQUESTS"):
        account_limit: int | None = env_int("SMSGW_ACCOUNT_CONCURRENT_REQUESTS", 1, minimum=1)
        account_source = "SMSGW_ACCOUNT_CONCURRENT_REQUESTS"
    elif declared is not None:
        account_limit, account_source = declared[0], f"the {declared[1]} provider's default"
    else:
        account_limit, account_source = None, ""
    processes, processes_source = ASSUMED_PROCESSES, "assumed"
    # Each variable is named in full (not looped over) so the settings reference finds it.
    if env_is_set("SMSGW_SEND_PROCESSES"):
        # The send processes of every host using the provider account (default: this host's worker
        # processes, SMSGW_WORKER_CONCURRENCY).
        processes = env_int("SMSGW_SEND_PROCESSES", 1, minimum=1)
        processes_source = "SMSGW_SEND_PROCESSES"
    elif env_is_set("SMSGW_WORKER_CONCURRENCY"):
        # Processes of this celery worker (deploy/systemd's units pass it as --concurrency).
        processes = env_int("SMSGW_WORKER_CONCURRENCY", 1, minimum=1)
        processes_source = "SMSGW_WORKER_CONCURRENCY"
    # Provider requests in flight per send process, instead of the share computed above.
    explicit = (
        env_int("SMSGW_SEND_CONCURRENCY", 1, minimum=1) if env_is_set("SMSGW_SEND_CONCURRENCY") else None
    )
    return SendConcurrency(explicit, account_limit, account_source, processes, processes_source)
