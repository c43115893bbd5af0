"""One message's trace across real processes (docs/observability.md, "Traces"; smsgw.tracing): gunicorn, a
Celery worker (its pool children run the sweep, the send batch, the receipts and the webhooks), beat and
the provider's sandbox, exporting to an OTLP/HTTP receiver this test starts (protobuf bodies decoded with
opentelemetry-proto's ExportTraceServiceRequest, as a collector would).

The request continues the caller's ``traceparent`` and answers it; the message keeps that trace's context;
each later span (the sweep's claim, the send batch, the provider request, the receipt batch, the tenant
webhook) is in that trace or links to it; every timeline entry names the trace; and no span carries the
body or the full number."""

from __future__ import annotations

import json
import secrets
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from bench.harness.devprocs import free_port
from scheduling.models import Message, MessageEvent, Status
from smsgw.runtime.queues import RECEIPTS, SEND_TRANSACTIONAL, SWEEP, WEBHOOKS
from tests.factories import recipient, tenant_with_key
from tests.harness import start_web
from tests.waiting import wait_for
from tests.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BODY = "Your code is 731904, do not share it"
LATER_SPANS = ("sweep claim", "send batch", "provider request", "receipts process", "tenant webhook")


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    """POST /v1/traces, protobuf: each span as a dict (name, ids in hex, links, attributes, resource)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.spans: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.add(request)
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

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    made = {
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent": span.parent_span_id.hex(),
                        "links": [link.trace_id.hex() for link in span.links],
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "service": resource.get("service.name"),
                        "pid": resource.get("process.pid"),
                    }
                    with self.lock:
                        self.spans.append(made)

    def named(self, name: str) -> list[dict]:
        with self.lock:
            return [s for s in self.spans if s["name"] == name]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _create(base: str, key: str, traceparent: str) -> tuple[dict, dict]:
    request = urllib.request.Request(
        f"{base}/v1/messages",
        data=json.dumps({"to": recipient(0), "body": BODY}).encode(),
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "traceparent": traceparent,
            "X-Request-ID": "client-req-42",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read()), {k.lower(): v for k, v in response.headers.items()}


def _in_trace(span: dict, trace_id: str) -> bool:
    return span["trace_id"] == trace_id or trace_id in span["links"]


def _strings(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


@pytest.fixture
def collector():
    """Stopped after the pipeline (asked for first): the processes export their last spans as they stop,
    and an exporter facing a closed port retries until its timeout."""
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


def test_one_message_is_one_trace_from_the_request_to_the_tenant_webhook_across_processes(
    collector, pipeline, settings
):
    settings.WEBHOOK_ALLOW_PRIVATE = settings.WEBHOOK_ALLOW_HTTP = True  # the receiver is on loopback
    from receipts.webhooks import tenant_webhook_configure

    hooks = WebhookReceiver().start()
    tenant, key = tenant_with_key("traced")
    tenant_webhook_configure(tenant=tenant, url=hooks.url, rotate_secret=True)
    try:
        base = start_web(
            pipeline,
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
            OTEL_BSP_SCHEDULE_DELAY="100",  # export within 0.1 s of a span's end (default 5 s)
            SMSGW_WEBHOOK_ALLOW_PRIVATE="1",
            SMSGW_WEBHOOK_ALLOW_HTTP="1",
        )
        pipeline.worker(queues=",".join((SWEEP, SEND_TRANSACTIONAL, RECEIPTS, WEBHOOKS)))
        pipeline.beat()
        pipeline.ready()

        caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        created, headers = _create(base, key, f"00-{caller_trace}-{caller_span}-01")
        # Honoured and answered: the response names our span in the caller's trace, and the request id.
        assert headers["traceparent"].startswith(f"00-{caller_trace}-"), headers
        assert headers["request-id"] == "client-req-42", headers
        message = Message.objects.get(public_id=created["id"])
        assert message.trace_context == headers["traceparent"]

        pipeline.wait_until(
            lambda: (
                Message.objects.filter(pk=message.pk, status=Status.DELIVERED).exists()
                and any(
                    (h["json"] or {}).get("data", {}).get("status") == "delivered" for h in hooks.received
                )
            ),
            60,
            "the message delivered and its webhook received",
        )
        wait_for(lambda: all(collector.named(name) for name in LATER_SPANS), 15, "every span exported")
    finally:
        hooks.stop()

    # The API request's span continues the caller's: same trace, the caller's span its parent.
    (web,) = [s for s in collector.named("POST v1/messages")]
    assert (web["trace_id"], web["parent"]) == (caller_trace, caller_span)
    assert web["attributes"]["smsgw.request_id"] == "client-req-42"
    assert web["attributes"]["smsgw.message.id"] == message.public_id
    assert web["service"] == "smsgw-web"

    # Every later stage, in other processes, is in the trace or links to it.
    for name in LATER_SPANS:
        spans = [s for s in collector.named(name) if _in_trace(s, caller_trace)]
        assert spans, (name, collector.named(name))
        assert all(s["service"] == "smsgw-worker" and s["pid"] != web["pid"] for s in spans), spans
    (request,) = [s for s in collector.named("provider request") if _in_trace(s, caller_trace)]
    message.refresh_from_db()
    assert request["attributes"]["smsgw.provider_message_id"] == message.provider_message_id
    assert request["attributes"]["smsgw.message.to"] != recipient(0)
    assert request["attributes"]["smsgw.message.to"].endswith(recipient(0)[-2:])
    # The provider's status callbacks name the same reference on their request's span.
    callbacks = [s for s in collector.spans if s["name"].startswith("POST receipts/")]
    assert any(
        s["attributes"].get("smsgw.provider_message_id") == message.provider_message_id for s in callbacks
    )
    receipts = [s for s in collector.named("receipts process") if _in_trace(s, caller_trace)]
    assert any(message.provider_message_id in s["attributes"]["smsgw.provider_message_ids"] for s in receipts)
    # The send batch continues the sweep pass that published it.
    sweeps = {s["span_id"]: s for s in collector.named("sweep claim") if _in_trace(s, caller_trace)}
    (send,) = [s for s in collector.named("send batch") if _in_trace(s, caller_trace)]
    assert send["parent"] in sweeps, (send, sweeps)

    # The timeline names the trace on every entry.
    details = list(MessageEvent.objects.filter(message=message).values_list("kind", "details"))
    assert [kind for kind, d in details if d.get("trace_id") != caller_trace] == [], details

    # Nothing in any span carries the body, the full number or a query string.
    digits = recipient(0).removeprefix("+")
    for span in collector.spans:
        for value in span["attributes"].values():
            for text in _strings(value):
                assert BODY not in text and digits not in text and "?" not in text, span
