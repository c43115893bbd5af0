"""The processes a scenario measures: the sandbox standing for the provider, beat, one sweep worker and
the send workers, each a real process started as production starts it."""

from __future__ import annotations

import os
import re

from django.conf import settings

from bench.harness import devprocs

SWEEP_LOG = re.compile(
    r"sweep expired=\d+ queued=\{([^}]*)\} republished=\d+ leases_expired=\d+ in ([\d.]+) ms"
)


UNLIMITED_RATE_ENV = (
    "SMSGW_RATE_LONG_CODE",
    "SMSGW_RATE_TOLL_FREE",
    "SMSGW_RATE_SHORT_CODE",
    "SMSGW_RATE_ALPHANUMERIC",
    "SMSGW_RATE_MESSAGING_SERVICE",
    "SMSGW_ACCOUNT_RATE",
)


class Topology:
    """sandbox + beat + one sweep worker + send workers, as separate processes."""

    def __init__(
        self,
        *,
        latency_ms: int,
        send_concurrency: int,
        send_workers: int = 1,
        pool: str = "prefork",
        env: dict[str, str] | None = None,
        sandbox_args: list[str] | None = None,
        control_port: int | None = None,
        sandbox_realtime: bool = False,
    ):
        from delivery.providers.twilio.sandbox.process import TwilioSandboxProcess

        # The sandbox stands for the provider, which runs on its own machines: here it shares two cores
        # with everything measured, so it runs at a higher priority where that is allowed (root), or
        # its own scheduling delays would show up as our bursts in the arrival times it records.
        # ``sandbox_realtime``: the real-time FIFO class instead (chrt), so its event loop runs the moment
        # a request arrives, whatever else is runnable (the kernel still keeps 5% of each second for the
        # other processes).
        prefix = []
        if os.geteuid() == 0:
            prefix = ["chrt", "--fifo", "1"] if sandbox_realtime else ["nice", "-n", "-10"]
        self.sandbox = TwilioSandboxProcess(
            extra_args=["--latency-ms", str(latency_ms), *(sandbox_args or [])],
            control_port=control_port,
            command_prefix=prefix,
        ).start()
        self.env = dict(os.environ)
        self.env.update(
            TWILIO_API_BASE_URL=self.sandbox.base_url,
            TWILIO_ACCOUNT_SID=self.sandbox.account_sid,
            TWILIO_AUTH_TOKEN=self.sandbox.auth_token,
            PYTHONUNBUFFERED="1",
            SMSGW_LOG_LEVEL="INFO",
            # Scenarios that are not about pacing run with limits above what the machine can do.
            **dict.fromkeys(UNLIMITED_RATE_ENV, "1000000"),
        )
        # Requests in flight per send process as in every recorded figure (docs/benchmarks.md), not the
        # share of a real account's concurrent-request limit the default now takes (smsgw.config.concurrency):
        # the sandbox sets no such limit unless a scenario gives it one. A scenario's env may set it.
        self.env.setdefault("SMSGW_SEND_CONCURRENCY", "250")
        self.env.update(env or {})
        self.procs: list[devprocs.Proc] = []
        self.sweeper = devprocs.celery_worker("sweeper", self.env, queues="sweep", concurrency=1)
        self.procs.append(self.sweeper)
        self.senders = [
            devprocs.celery_worker(
                f"sender{i}", self.env, queues=devprocs.SEND_QUEUES, concurrency=send_concurrency, pool=pool
            )
            for i in range(send_workers)
        ]
        self.procs += self.senders
        self.beat = devprocs.celery_beat("beat", self.env)
        self.procs.append(self.beat)

    def worker_pids(self) -> list[int]:
        return [p.pid for p in [self.sweeper, *self.senders]]

    def sweep_passes(self) -> list[tuple[int, float]]:
        out = []
        for line in SWEEP_LOG.findall(self.sweeper.log()):
            claimed = sum(int(v) for v in re.findall(r": (\d+)", line[0]))
            out.append((claimed, float(line[1])))
        return out

    def stop(self):
        for p in self.procs:
            p.stop()
        self.sandbox.stop()


def broker() -> str:
    """The broker's scheme (redis, amqp), named in every result."""
    return settings.CELERY_BROKER_URL.split("://", 1)[0]
