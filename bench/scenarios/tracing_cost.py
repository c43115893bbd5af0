"""``python -m bench tracing-cost`` (docs/running-benchmarks.md): what tracing costs a message (issue 43:
at most 5% more CPU a message). The same burst and the same ingest run twice in one run, tracing off and
then on, exporting every span (sampling 1.0) over OTLP/HTTP to a local receiver that this scenario starts
(docs/observability.md, "Traces"); it prints each side's CPU a message and the ratio. Prints figures,
asserts nothing."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from bench.harness import devprocs
from bench.harness.figures import say


class OtlpSink:
    """A collector's OTLP/HTTP trace endpoint (``POST /v1/traces``, protobuf) that counts the spans it is
    sent and keeps nothing else."""

    def __init__(self) -> None:
        self.port = devprocs.free_port()
        self.spans = 0
        self.requests = 0
        lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                with lock:
                    sink.spans += n
                    sink.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def env(self) -> dict[str, str]:
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "SMSGW_TRACING": "1",
            "SMSGW_TRACING_SAMPLE_RATIO": "1.0",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


OFF = {"SMSGW_TRACING": "0"}


def tracing_cost(
    *, n: int, latency_ms: int, concurrency: int, lead_seconds: float, timeout: float, ingest_seconds: int
) -> dict:
    from bench.scenarios.ingest import ingest
    from bench.scenarios.throughput import burst

    sink = OtlpSink()
    try:
        runs: dict[str, dict] = {}
        for side, env in (("off", OFF), ("on", sink.env())):
            say(f"tracing-cost: burst of {n}, tracing {side}")
            before = sink.spans
            b = burst(
                n=n,
                latency_ms=latency_ms,
                concurrency=concurrency,
                lead_seconds=lead_seconds,
                timeout=timeout,
                baseline=False,
                env=env,
            )
            say(f"tracing-cost: ingest for {ingest_seconds} s, tracing {side}")
            i = ingest(
                seconds=ingest_seconds,
                concurrency=16,
                web_workers=2,
                threads=1,
                healthz=False,
                batch=0,
                env_extra=env,
            )
            runs[side] = {
                "burst_all_sent": b["all_sent"],
                "burst_throughput_msg_s": b["throughput_msg_s"],
                "burst_send_worker_cpu_ms_per_message": b["send_worker_cpu_ms_per_message"],
                "burst_cpu_seconds": b["cpu_seconds"],
                "ingest_requests_per_s": i["requests_per_s"],
                "ingest_web_cpu_ms_per_request": i.get("web_cpu_ms_per_request"),
                "ingest_latency_ms_p50": i["latency_ms_p50"],
                "ingest_latency_ms_p99": i["latency_ms_p99"],
                "spans_received": sink.spans - before,
            }
    finally:
        sink.close()

    def ratio(key: str) -> float | None:
        off, on = runs["off"][key], runs["on"][key]
        return round(on / off, 3) if off and on else None

    return {
        "scenario": "tracing-cost",
        "messages": n,
        "sandbox_latency_ms": latency_ms,
        **runs,
        # Target (issue 43): at most 1.05, tracing on costs at most 5% more CPU a message.
        "ratio_send_cpu_on_to_off": ratio("burst_send_worker_cpu_ms_per_message"),
        "ratio_ingest_web_cpu_on_to_off": ratio("ingest_web_cpu_ms_per_request"),
    }
