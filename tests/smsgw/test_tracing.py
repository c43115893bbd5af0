"""smsgw.tracing without processes or a database: the traceparent rules, the request's span and its
header, and the trace id on log lines. One message's trace through real processes is
tests/integration/test_tracing.py."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from smsgw import tracing
from smsgw.runtime.logs_json import JsonFormatter, PlainFormatter

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
INCOMING = f"00-{TRACE}-{SPAN}-01"
NUMBER = "+14155550123"


@pytest.fixture
def spans(settings):
    """Tracing on, this process's spans kept in memory; returns a function giving the finished ones."""
    settings.TRACING = True
    exporter = InMemorySpanExporter()
    tracing.shutdown()
    tracing.setup("test", exporter=exporter)

    def finished():
        tracing._provider.force_flush()
        return exporter.get_finished_spans()

    yield finished
    tracing.shutdown()


@pytest.mark.parametrize(
    "value",
    [
        "",
        "nonsense",
        f"01-{TRACE}-{SPAN}-01",  # another version
        f"00-{'0' * 32}-{SPAN}-01",  # the all-zero ids are invalid
        f"00-{TRACE}-{'0' * 16}-01",
        f"{INCOMING}-extra",
        f"00-{TRACE[:-1]}g-{SPAN}-01",
        f"00-{TRACE} {NUMBER}-{SPAN}-01",
    ],
)
def test_only_a_w3c_traceparent_is_read(value):
    assert tracing.span_context_of(value) is None and tracing.trace_id_of(value) == ""


def test_a_traceparent_names_its_trace():
    assert tracing.trace_id_of(INCOMING) == TRACE
    assert tracing.trace_id_of(INCOMING.upper()) == TRACE  # hex digits in either case
    assert tracing.log_fields("msg_1", INCOMING) == {"message_id": "msg_1", "trace_id": TRACE}
    assert tracing.log_fields("msg_1", "") == {"message_id": "msg_1"}


def test_off_no_span_is_made_and_the_callers_traceparent_is_answered_back(settings):
    settings.TRACING = False
    resp = Client().get("/v1/no-such-endpoint", HTTP_TRACEPARENT=INCOMING)
    assert resp["traceparent"] == INCOMING
    assert not Client().get("/v1/no-such-endpoint", HTTP_TRACEPARENT="nonsense").has_header("traceparent")
    with tracing.span("anything") as span:
        assert not span.is_recording() and tracing.traceparent_current() == ""


def test_a_request_continues_the_callers_trace_with_its_request_id_and_no_number_or_query(spans):
    resp = Client().get(
        f"/v1/no-such/{NUMBER}?to={NUMBER}", HTTP_TRACEPARENT=INCOMING, HTTP_X_REQUEST_ID="req-7"
    )
    (span,) = spans()
    assert (f"{span.context.trace_id:032x}", f"{span.parent.span_id:016x}") == (TRACE, SPAN)
    assert resp["traceparent"] == tracing.traceparent_of(span.context)
    attributes = dict(span.attributes)
    assert attributes["smsgw.request_id"] == resp["Request-Id"] == "req-7"
    assert attributes["http.response.status_code"] == 404
    assert NUMBER not in str(attributes) and "?" not in str(attributes), attributes


def test_a_request_without_a_traceparent_starts_a_trace_and_probes_make_none(spans):
    Client().get("/healthz")
    resp = Client().get("/v1/no-such-endpoint")
    (span,) = spans()
    assert span.parent is None and resp["traceparent"] == tracing.traceparent_of(span.context)


@pytest.mark.parametrize(("formatter", "read"), [(PlainFormatter, None), (JsonFormatter, json.loads)])
def test_a_log_line_written_in_a_span_names_its_trace(spans, formatter, read):
    record = logging.LogRecord("smsgw.test", logging.INFO, __file__, 1, "sent", None, None)
    with tracing.span("send batch", parent=INCOMING):
        line = formatter().format(record)
    outside = formatter().format(record)
    if read is None:
        assert line.endswith(f" trace_id={TRACE}") and "trace_id" not in outside
    else:
        assert read(line)["trace_id"] == TRACE and "trace_id" not in read(outside)
