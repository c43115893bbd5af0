"""``python -m bench <scenario> ...`` (bench/__main__.py) — prints figures, asserts nothing. The command's
options and dispatch; the scenarios are the modules of bench/scenarios/, imported inside handle() so that
``--help`` needs neither them nor psutil."""

import json

from django.core.management.base import BaseCommand, CommandError
from django.db import connection


class Command(BaseCommand):
    help = "Benchmark the pipeline on PostgreSQL + a real broker (empties the message tables first!)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="scenario", required=True)
        p = sub.add_parser("burst", help="N messages due at one moment")
        p.add_argument("--messages", type=int, default=50_000)
        p.add_argument("--latency-ms", type=int, default=0)
        p.add_argument("--concurrency", type=int, default=2, help="send worker processes")
        p.add_argument("--lead", type=float, default=10.0, help="seconds between load and due moment")
        p.add_argument("--timeout", type=float, default=300.0)
        p.add_argument(
            "--no-baseline",
            dest="baseline",
            action="store_false",
            help="skip the same number of Celery ETA no-op tasks due at once (bench.scenarios.baseline)",
        )
        p = sub.add_parser(
            "faults", help="the burst fault-free, then with timeouts and hung accepts, same run"
        )
        p.add_argument("--messages", type=int, default=5_000)
        p.add_argument(
            "--timeout-share", type=float, default=0.01, help="requests timing out, nothing stored"
        )
        p.add_argument("--hang-share", type=float, default=0.005, help="requests stored, then hung")
        p.add_argument(
            "--client-timeout", type=float, default=10.0, help="TWILIO_TIMEOUT_SECONDS (production default)"
        )
        p.add_argument("--hang-seconds", type=float, default=15.0, help="how long the sandbox hangs")
        p.add_argument("--first-look", type=int, default=None, help="SMSGW_RECONCILE_FIRST_LOOK_SECONDS")
        p.add_argument("--absent-grace", type=int, default=None, help="SMSGW_RECONCILE_ABSENT_GRACE_SECONDS")
        p.add_argument("--concurrency", type=int, default=3)
        p.add_argument("--lead", type=float, default=10.0)
        p.add_argument("--timeout", type=float, default=300.0)
        p = sub.add_parser("history", help="the hot path with and without history; pruning a day")
        p.add_argument("--pending", type=int, default=100_000, help="scheduled messages in the live table")
        p.add_argument(
            "--history", type=int, default=2_000_000, help="finished messages in history (20M: long)"
        )
        p.add_argument("--day", type=int, default=1_000_000, help="messages in the purge day removed")
        p.add_argument("--repeats", type=int, default=15)
        p = sub.add_parser("steady", help="a constant rate of messages becoming due")
        p.add_argument("--rate", type=int, default=500)
        p.add_argument("--seconds", type=int, default=60)
        p.add_argument("--latency-ms", type=int, default=0)
        p.add_argument("--concurrency", type=int, default=2)
        p.add_argument("--timeout", type=float, default=120.0)
        p = sub.add_parser("soak", help="steady load for many minutes, RSS of every process each minute")
        p.add_argument("--rate", type=int, default=200)
        p.add_argument("--minutes", type=int, default=30)
        p.add_argument("--concurrency", type=int, default=3)
        p.add_argument("--latency-ms", type=int, default=0)
        p.add_argument(
            "--max-memory-kb",
            type=int,
            default=None,
            help="SMSGW_WORKER_MAX_MEMORY_KB for the workers (default: settings; 0 = unbounded)",
        )
        p.add_argument(
            "--trace-memory", action="store_true", help="tracemalloc in the workers (unbounded unless given)"
        )
        p.add_argument("--no-receipts", dest="receipts", action="store_false", help="no status callbacks")
        p.add_argument("--web-workers", type=int, default=2)
        p.add_argument("--receipt-processes", type=int, default=1, help="the receipts worker's concurrency")
        p.add_argument("--web-threads", type=int, default=1, help="gunicorn threads per worker (callbacks)")
        p.add_argument(
            "--vacuum-every",
            type=float,
            default=60.0,
            help="autovacuum off on the server: VACUUM (ANALYZE) the written tables this often (0 = never)",
        )
        p.add_argument("--timeout", type=float, default=120.0, help="after the last minute, to drain")
        p = sub.add_parser(
            "broker-restart", help="a drain fault-free, then with its Redis killed and restarted empty"
        )
        p.add_argument("--messages", type=int, default=20_000)
        p.add_argument("--down-seconds", type=float, default=5.0)
        p.add_argument("--kill-at", type=float, default=0.3, help="share sent when Redis is killed")
        p.add_argument("--concurrency", type=int, default=3)
        p.add_argument("--latency-ms", type=int, default=0)
        p.add_argument("--lead", type=float, default=5.0)
        p.add_argument("--timeout", type=float, default=300.0)
        p = sub.add_parser("metrics", help="cost of one /metrics scrape with many pending messages")
        p.add_argument("--messages", type=int, default=1_000_000, help="pending messages")
        p.add_argument("--terminal", type=int, default=200_000, help="delivered messages beside them")
        p.add_argument("--repeats", type=int, default=50)
        p = sub.add_parser("console", help="render time of the console's landing page with many messages")
        p.add_argument("--messages", type=int, default=10_000_000, help="messages in the table")
        p.add_argument("--hour-share", type=float, default=0.01, help="share of them sent in the last hour")
        p.add_argument("--repeats", type=int, default=30)
        p = sub.add_parser("pending", help="empty sweep cost and worker memory with many pending")
        p.add_argument("--messages", type=int, default=1_000_000)
        p.add_argument("--repeats", type=int, default=200)
        p.add_argument("--idle-seconds", type=int, default=20)
        p = sub.add_parser("receipts", help="signed status callbacks through gunicorn + the receipts worker")
        p.add_argument("--callbacks", type=int, default=50_000)
        p.add_argument("--rate", type=float, default=None, help="callbacks/s (default: as fast as possible)")
        p.add_argument("--concurrency", type=int, default=64, help="client connections")
        p.add_argument("--web-workers", type=int, default=3)
        p.add_argument("--timeout", type=float, default=300.0)
        p = sub.add_parser("sdk", help="client CPU per submission by the ways of calling the twilio SDK")
        p.add_argument("--requests", type=int, default=5000, help="per variant and round")
        p.add_argument(
            "--in-flight", type=int, default=250, help="requests in flight (SMSGW_SEND_CONCURRENCY)"
        )
        p.add_argument("--rounds", type=int, default=5, help="every variant once per round, round-robin")
        p.add_argument("--latency-ms", type=int, default=0, help="the sandbox's answer delay")
        p.add_argument("--pools", type=int, nargs="*", default=[20, 50], help="connection pool caps to try")
        p.add_argument("--warmup", type=int, default=300, help="requests before each measured run")
        p = sub.add_parser("burst-receipts", help="send burst while a burst of callbacks is processed")
        p.add_argument("--messages", type=int, default=50_000)
        p.add_argument("--receipts", type=int, default=50_000)
        p.add_argument("--latency-ms", type=int, default=0)
        p.add_argument("--concurrency", type=int, default=3)
        p.add_argument("--web-workers", type=int, default=2)
        p.add_argument("--timeout", type=float, default=300.0)
        p = sub.add_parser(
            "uncertain",
            help="a burst fault-free, then with stored-but-unanswered and never-stored submissions, same run",
        )
        p.add_argument("--messages", type=int, default=20_000, help="per run")
        p.add_argument(
            "--store-then-500",
            type=float,
            default=0.01,
            help="stored, yet answered 500 (store_then_500_rate)",
        )
        p.add_argument(
            "--store-then-503",
            type=float,
            default=0.0,
            help="stored, yet answered 503 (store_then_503_rate)",
        )
        p.add_argument(
            "--answers-lost",
            type=float,
            default=0.005,
            help="stored, then the connection closed without an answer (store_then_drop_rate)",
        )
        p.add_argument(
            "--absent",
            "--lost-share",
            dest="absent",
            type=float,
            default=0.005,
            help="never stored, the answer later than the client's timeout (timeout_rate)",
        )
        p.add_argument(
            "--accept-then-hang",
            "--share",
            dest="accept_then_hang",
            type=float,
            default=0.0,
            help="stored, the answer later than the client's timeout (accept_then_hang_rate)",
        )
        p.add_argument(
            "--list-lag", type=float, default=120.0, help="seconds the Messages list lags (list_lag_seconds)"
        )
        p.add_argument("--queue-delay-ms", type=int, default=60_000, help="time queued at the provider")
        p.add_argument(
            "--no-callbacks",
            dest="callbacks",
            action="store_false",
            help="the sandbox posts no status callbacks: found only by the list or a fetch",
        )
        p.add_argument(
            "--client-timeout",
            type=float,
            default=10.0,
            help="TWILIO_TIMEOUT_SECONDS (production default; shorter ones time out fault-free requests "
            "on a loaded machine)",
        )
        p.add_argument("--first-look", type=int, default=10, help="SMSGW_RECONCILE_FIRST_LOOK_SECONDS")
        p.add_argument("--absent-grace", type=int, default=30, help="SMSGW_RECONCILE_ABSENT_GRACE_SECONDS")
        p.add_argument("--reconcile-list-lag", type=int, default=150, help="SMSGW_RECONCILE_LIST_LAG_SECONDS")
        p.add_argument(
            "--no-fault-free", dest="fault_free", action="store_false", help="skip the fault-free run"
        )
        p.add_argument("--concurrency", type=int, default=3)
        p.add_argument("--web-workers", type=int, default=2, help="gunicorn workers for the callbacks")
        p.add_argument("--timeout", type=float, default=900.0, help="per run, after the due moment")
        p = sub.add_parser("materialize", help="schedule materializer throughput (occurrences/s)")
        p.add_argument("--schedules", type=int, default=100_000)
        p.add_argument("--processes", type=int, default=1, help="materializer processes at once")
        p.add_argument("--batch-size", type=int, default=None)
        p = sub.add_parser("materialize-idle", help="a materializer run with nothing due")
        p.add_argument("--schedules", type=int, default=100_000)
        p.add_argument("--repeats", type=int, default=200)
        p = sub.add_parser("preview", help="GET /v1/schedules/{id}/occurrences for several rules")
        p.add_argument("--count", type=int, default=100)
        p.add_argument("--repeats", type=int, default=50)
        p = sub.add_parser("paced", help="a burst paced by sender and account rates the sandbox enforces")
        p.add_argument("--messages", type=int, default=100_000)
        p.add_argument("--senders", type=int, default=50)
        p.add_argument("--rate", type=float, default=20.0, help="segments/s per sender (both sides)")
        p.add_argument("--queue-seconds", type=float, default=2.0, help="the sandbox's queue per sender")
        p.add_argument("--timeout", type=float, default=300.0)
        p.add_argument(
            "--sandbox-realtime",
            action="store_true",
            help="run the sandbox in the real-time FIFO class (root), not at nice -10: the provider's own "
            "scheduling delays out of its arrival times",
        )
        p = sub.add_parser(
            "guards", help="the paced burst without, then with a 1M suppression list and the guards on"
        )
        p.add_argument("--messages", type=int, default=30_000)
        p.add_argument("--senders", type=int, default=50)
        p.add_argument("--rate", type=float, default=60.0, help="segments/s per sender: above the machine")
        p.add_argument("--suppressions", type=int, default=1_000_000)
        p.add_argument(
            "--rounds",
            type=int,
            default=2,
            help="baseline/guarded pairs, alternated (0: only the in-process cost of the checks)",
        )
        p.add_argument("--queue-seconds", type=float, default=2.0)
        p.add_argument("--timeout", type=float, default=300.0)
        p = sub.add_parser("adaptive", help="backpressure: the real sender rate is below the configured")
        p.add_argument("--senders", type=int, default=5)
        p.add_argument("--rate", type=float, default=20.0, help="what the gateway is told")
        p.add_argument("--real-rate", type=float, default=10.0, help="what the sandbox really sends")
        p.add_argument("--seconds", type=int, default=60)
        p.add_argument("--queue-seconds", type=float, default=2.0)
        p = sub.add_parser("fairness", help="one tenant's backlog against another tenant's stream")
        p.add_argument("--a-messages", type=int, default=200_000)
        p.add_argument("--account-rate", type=float, default=1000.0)
        p.add_argument("--stream-rate", type=float, default=10.0)
        p.add_argument("--seconds", type=int, default=60)
        p.add_argument("--timeout", type=float, default=120.0)
        p = sub.add_parser("outage", help="the provider fails mid-drain: 503, then refused connections")
        p.add_argument("--messages", type=int, default=20_000)
        p.add_argument("--outage-seconds", type=int, default=60)
        p.add_argument("--refuse-share", type=float, default=0.5)
        p.add_argument("--timeout", type=float, default=300.0)
        p = sub.add_parser(
            "failover", help="routed messages at a steady rate; the primary provider answers 503 mid-run"
        )
        p.add_argument("--messages", type=int, default=20_000)
        p.add_argument("--rate", type=float, default=500.0, help="messages due per second")
        p.add_argument(
            "--outage-at",
            type=float,
            default=0.125,
            help="when the 503s start, as a share of the due span (0.125: a 30-s outage centred in 40 s)",
        )
        p.add_argument("--outage-seconds", type=float, default=30.0)
        p.add_argument("--reconcile-list-lag", type=int, default=5, help="SMSGW_RECONCILE_LIST_LAG_SECONDS")
        p.add_argument("--concurrency", type=int, default=3)
        p.add_argument("--lead", type=float, default=10.0, help="seconds between the birth and the first due")
        p.add_argument("--timeout", type=float, default=300.0, help="after the last due moment, to drain")
        p = sub.add_parser("limiter", help="the 50,000 burst with pacing off and on, same run")
        p.add_argument("--messages", type=int, default=50_000)
        p.add_argument("--timeout", type=float, default=300.0)
        p = sub.add_parser("inbound", help="replies through the web process to the webhook and the pull API")
        p.add_argument("--rate", type=int, default=500, help="new replies a second")
        p.add_argument("--seconds", type=int, default=60)
        p.add_argument("--retry-share", type=float, default=0.1, help="replies the provider posts again")
        p.add_argument("--web-workers", type=int, default=2)
        p.add_argument("--drain-timeout", type=float, default=120.0)
        p = sub.add_parser(
            "tracing-cost", help="the burst and the ingest with tracing off, then on (OTLP to a local sink)"
        )
        p.add_argument("--messages", type=int, default=20_000)
        p.add_argument("--latency-ms", type=int, default=0)
        p.add_argument("--concurrency", type=int, default=2, help="send worker processes")
        p.add_argument("--lead", type=float, default=10.0, help="seconds between load and due moment")
        p.add_argument("--timeout", type=float, default=300.0)
        p.add_argument("--ingest-seconds", type=int, default=15)
        p = sub.add_parser("ingest", help="POST /v1/messages through gunicorn")
        p.add_argument("--seconds", type=int, default=15)
        p.add_argument("--concurrency", type=int, default=32, help="client connections")
        p.add_argument("--web-workers", type=int, default=3)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--no-healthz", dest="healthz", action="store_false", help="skip the GET /healthz run")
        p.add_argument(
            "--batch",
            type=int,
            default=100,
            help="messages per POST /v1/messages/batch in the batch run (0: no batch run)",
        )
        p = sub.add_parser(
            "facade", help="POST .../Messages.json (Twilio's form, Basic) beside POST /v1/messages, same run"
        )
        # The client and server settings of ``ingest`` (bench/scenarios/ingest.py), so the two compare.
        p.add_argument("--seconds", type=int, default=15, help="per run")
        p.add_argument("--concurrency", type=int, default=32, help="client connections")
        p.add_argument("--web-workers", type=int, default=3)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--rounds", type=int, default=2, help="v1 then facade, facade then v1, ...")
        p = sub.add_parser("campaign", help="a CSV campaign uploaded to gunicorn, made by a celery worker")
        p.add_argument("--recipients", type=int, default=1_000_000)
        p.add_argument("--web-workers", type=int, default=2)
        p.add_argument("--timeout", type=float, default=900.0)
        p.add_argument("--keep-file", action="store_true", help="leave the generated CSV on disk")
        p.add_argument("--processes", type=int, default=2, help="the campaigns worker's pool processes")
        p.add_argument(
            "--ranges", type=int, default=None, help="line ranges (default: SMSGW_CAMPAIGN_MAKE_RANGES)"
        )
        p.add_argument(
            "--single-first",
            action="store_true",
            help="first the same list made by one process in one range, same run; prints the ratio",
        )
        p = sub.add_parser(
            "hostile", help="the worst input of each kind to every endpoint; server CPU per request"
        )
        p.add_argument("--repeat", type=int, default=5, help="requests per case (CPU is their mean)")
        p = sub.add_parser("campaign_pause", help="pause a 1M-message campaign mid-send; progress read cost")
        p.add_argument("--messages", type=int, default=1_000_000)
        p.add_argument("--rate", type=float, default=200.0, help="segments/s of the campaign's sender")
        p.add_argument("--send-seconds", type=float, default=10.0, help="sending before the pause")
        p.add_argument("--reads", type=int, default=200, help="progress reads timed while sending")
        p.add_argument("--paused-seconds", type=float, default=8.0, help="how long it stays paused")
        p.add_argument("--timeout", type=float, default=300.0, help="for the first submission")
        parser.add_argument("--yes", action="store_true", help="allow a database whose name lacks 'bench'")

    def handle(self, *args, scenario, yes, **opts):
        if connection.vendor != "postgresql":
            raise CommandError("the benchmark runs on PostgreSQL: set DATABASE_URL")
        if "bench" not in connection.settings_dict["NAME"] and not yes:
            raise CommandError("this empties the message tables; use a database named *bench* or pass --yes")
        opts = {
            k: v
            for k, v in opts.items()
            if k
            not in (
                "verbosity",
                "settings",
                "pythonpath",
                "traceback",
                "no_color",
                "force_color",
                "skip_checks",
            )
        }
        if scenario == "burst":
            from bench.scenarios.throughput import burst

            result = burst(
                n=opts["messages"],
                latency_ms=opts["latency_ms"],
                concurrency=opts["concurrency"],
                lead_seconds=opts["lead"],
                timeout=opts["timeout"],
                baseline=opts["baseline"],
            )
        elif scenario == "tracing-cost":
            from bench.scenarios.tracing_cost import tracing_cost

            result = tracing_cost(
                n=opts["messages"],
                latency_ms=opts["latency_ms"],
                concurrency=opts["concurrency"],
                lead_seconds=opts["lead"],
                timeout=opts["timeout"],
                ingest_seconds=opts["ingest_seconds"],
            )
        elif scenario == "faults":
            from bench.scenarios.faults import faults

            result = faults(
                n=opts["messages"],
                timeout_share=opts["timeout_share"],
                hang_share=opts["hang_share"],
                concurrency=opts["concurrency"],
                lead_seconds=opts["lead"],
                client_timeout=opts["client_timeout"],
                hang_seconds=opts["hang_seconds"],
                timeout=opts["timeout"],
                first_look=opts["first_look"],
                absent_grace=opts["absent_grace"],
            )
        elif scenario == "soak":
            from bench.scenarios.soak import soak

            result = soak(
                rate=opts["rate"],
                minutes=opts["minutes"],
                concurrency=opts["concurrency"],
                latency_ms=opts["latency_ms"],
                max_memory_kb=opts["max_memory_kb"],
                trace_memory=opts["trace_memory"],
                receipts=opts["receipts"],
                web_workers=opts["web_workers"],
                timeout=opts["timeout"],
                receipt_processes=opts["receipt_processes"],
                web_threads=opts["web_threads"],
                vacuum_every=opts["vacuum_every"],
            )
        elif scenario == "broker-restart":
            from bench.scenarios.broker_restart import broker_restart

            result = broker_restart(
                n=opts["messages"],
                down_seconds=opts["down_seconds"],
                kill_at=opts["kill_at"],
                concurrency=opts["concurrency"],
                latency_ms=opts["latency_ms"],
                lead_seconds=opts["lead"],
                timeout=opts["timeout"],
            )
        elif scenario == "steady":
            from bench.scenarios.throughput import steady

            result = steady(
                rate=opts["rate"],
                seconds=opts["seconds"],
                latency_ms=opts["latency_ms"],
                concurrency=opts["concurrency"],
                timeout=opts["timeout"],
            )
        elif scenario == "receipts":
            from bench.scenarios import receipts as receipts_bench

            result = receipts_bench.receipts(
                n=opts["callbacks"],
                concurrency=opts["concurrency"],
                rate=opts["rate"],
                web_workers=opts["web_workers"],
                timeout=opts["timeout"],
            )
        elif scenario == "sdk":
            from bench.scenarios.sdk import sdk

            result = sdk(**opts)  # its options are its parameters
        elif scenario == "burst-receipts":
            from bench.scenarios import receipts as receipts_bench

            result = receipts_bench.burst_under_receipts(
                n=opts["messages"],
                receipt_burst=opts["receipts"],
                latency_ms=opts["latency_ms"],
                concurrency=opts["concurrency"],
                web_workers=opts["web_workers"],
                timeout=opts["timeout"],
            )
        elif scenario in ("paced", "adaptive", "fairness", "outage", "limiter"):
            from bench.scenarios import pacing as bench_pacing

            if scenario == "paced":
                result = bench_pacing.paced(
                    n=opts["messages"],
                    senders=opts["senders"],
                    rate=opts["rate"],
                    queue_seconds=opts["queue_seconds"],
                    timeout=opts["timeout"],
                    sandbox_realtime=opts["sandbox_realtime"],
                )
            elif scenario == "adaptive":
                result = bench_pacing.adaptive(
                    senders=opts["senders"],
                    rate=opts["rate"],
                    real_rate=opts["real_rate"],
                    seconds=opts["seconds"],
                    queue_seconds=opts["queue_seconds"],
                )
            elif scenario == "fairness":
                result = bench_pacing.fairness(
                    a_messages=opts["a_messages"],
                    account_rate=opts["account_rate"],
                    stream_rate=opts["stream_rate"],
                    seconds=opts["seconds"],
                    timeout=opts["timeout"],
                )
            elif scenario == "outage":
                result = bench_pacing.outage(
                    n=opts["messages"],
                    outage_seconds=opts["outage_seconds"],
                    refuse_share=opts["refuse_share"],
                    timeout=opts["timeout"],
                )
            else:
                result = bench_pacing.limiter(n=opts["messages"], timeout=opts["timeout"])
        elif scenario == "guards":
            from bench.scenarios import guards as bench_guards

            result = bench_guards.guards(
                n=opts["messages"],
                senders=opts["senders"],
                rate=opts["rate"],
                suppressions=opts["suppressions"],
                queue_seconds=opts["queue_seconds"],
                timeout=opts["timeout"],
                rounds=opts["rounds"],
            )
        elif scenario == "uncertain":
            from bench.scenarios.uncertain import uncertain

            result = uncertain(
                n=opts["messages"],
                store_then_500=opts["store_then_500"],
                store_then_503=opts["store_then_503"],
                answers_lost=opts["answers_lost"],
                absent=opts["absent"],
                accept_then_hang=opts["accept_then_hang"],
                list_lag=opts["list_lag"],
                queue_delay_ms=opts["queue_delay_ms"],
                callbacks=opts["callbacks"],
                client_timeout=opts["client_timeout"],
                first_look=opts["first_look"],
                absent_grace=opts["absent_grace"],
                reconcile_list_lag=opts["reconcile_list_lag"],
                concurrency=opts["concurrency"],
                web_workers=opts["web_workers"],
                timeout=opts["timeout"],
                fault_free=opts["fault_free"],
            )
        elif scenario == "failover":
            from bench.scenarios.failover import failover

            result = failover(
                n=opts["messages"],
                rate=opts["rate"],
                outage_at=opts["outage_at"],
                outage_seconds=opts["outage_seconds"],
                reconcile_list_lag=opts["reconcile_list_lag"],
                concurrency=opts["concurrency"],
                lead_seconds=opts["lead"],
                timeout=opts["timeout"],
            )
        elif scenario in ("materialize", "materialize-idle", "preview"):
            from bench.scenarios import schedules as bench_schedules

            if scenario == "materialize":
                result = bench_schedules.materialize(
                    n=opts["schedules"], processes=opts["processes"], batch_size=opts["batch_size"]
                )
            elif scenario == "materialize-idle":
                result = bench_schedules.materialize_idle(n=opts["schedules"], repeats=opts["repeats"])
            else:
                result = bench_schedules.preview(count=opts["count"], repeats=opts["repeats"])
        elif scenario == "metrics":
            from bench.scenarios import metrics as bench_metrics

            result = bench_metrics.scrape_cost(
                n=opts["messages"], terminal=opts["terminal"], repeats=opts["repeats"]
            )
        elif scenario == "console":
            from bench.scenarios import console as bench_console

            result = bench_console.render_cost(
                n=opts["messages"], hour_share=opts["hour_share"], repeats=opts["repeats"]
            )
        elif scenario == "campaign":
            from bench.scenarios import campaigns as bench_campaigns

            result = bench_campaigns.campaign(
                recipients=opts["recipients"],
                web_workers=opts["web_workers"],
                timeout=opts["timeout"],
                keep_file=opts["keep_file"],
                processes=opts["processes"],
                ranges=opts["ranges"],
                single_first=opts["single_first"],
            )
        elif scenario == "campaign_pause":
            from bench.scenarios.campaign_pause import campaign_pause

            result = campaign_pause(
                n=opts["messages"],
                rate=opts["rate"],
                send_seconds=opts["send_seconds"],
                reads=opts["reads"],
                paused_seconds=opts["paused_seconds"],
                timeout=opts["timeout"],
            )
        elif scenario == "hostile":
            from bench.scenarios.hostile import hostile

            result = hostile(repeat=opts["repeat"])
        elif scenario == "facade":
            from bench.scenarios.facade import facade

            result = facade(
                seconds=opts["seconds"],
                concurrency=opts["concurrency"],
                web_workers=opts["web_workers"],
                threads=opts["threads"],
                rounds=opts["rounds"],
            )
        elif scenario == "history":
            from bench.scenarios.history import history

            result = history(
                pending=opts["pending"],
                history_rows=opts["history"],
                day_rows=opts["day"],
                repeats=opts["repeats"],
            )
        elif scenario == "inbound":
            from bench.scenarios.inbound import inbound

            result = inbound(
                rate=opts["rate"],
                seconds=opts["seconds"],
                retry_share=opts["retry_share"],
                web_workers=opts["web_workers"],
                drain_timeout=opts["drain_timeout"],
            )
        elif scenario == "pending":
            from bench.scenarios.throughput import pending

            result = pending(n=opts["messages"], repeats=opts["repeats"], idle_seconds=opts["idle_seconds"])
        else:
            from bench.scenarios.ingest import ingest

            result = ingest(
                seconds=opts["seconds"],
                concurrency=opts["concurrency"],
                web_workers=opts["web_workers"],
                threads=opts["threads"],
                healthz=opts["healthz"],
                batch=opts["batch"],
            )
        self.stdout.write(json.dumps(result, indent=2, default=str))
