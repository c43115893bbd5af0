"""gunicorn's own refusals (a request line or headers past its limits, a malformed request) answer in the
API's JSON envelope, not its HTML page, and never quote the refused input. tests/integration/
test_front_server.py sends the same requests to a real gunicorn."""

from __future__ import annotations

import json

import pytest
from gunicorn import util

from smsgw.runtime import gunicorn_conf, gunicorn_errors


def _split(raw: bytes) -> tuple[str, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert int(headers["Content-Length"]) == len(body)
    return status, headers, json.loads(body)


@pytest.mark.parametrize(
    ("status", "reason", "code", "field"),
    [
        (414, "URI Too Long", "url_too_long", "url"),
        (431, "Request Header Fields Too Large", "headers_too_large", "headers"),
        (400, "Bad Request", "bad_request", None),
    ],
)
def test_gunicorns_refusals_are_the_envelope(status, reason, code, field):
    line, headers, body = _split(gunicorn_errors.error_response(status, reason))
    assert line == f"HTTP/1.1 {status} {reason}"
    assert headers["Content-Type"] == "application/json" and headers["Connection"] == "close"
    assert body["error"]["code"] == code and body["error"]["message"]
    if field:
        assert list(body["error"]["fields"]) == [field]


def test_the_refused_input_is_not_quoted(monkeypatch):
    written: list[bytes] = []
    monkeypatch.setattr(util, "write_nonblock", lambda sock, data, chunked=False: written.append(data))
    gunicorn_errors.write_error(None, 400, "Bad Request", "Invalid Request Line '<script>+14155550123'")
    assert b"<script>" not in written[0] and b"14155550123" not in written[0]


def test_the_config_installs_the_writer_and_raises_the_request_line_limit(monkeypatch):
    monkeypatch.setattr(util, "write_error", util.write_error)  # restored after the test
    gunicorn_conf.on_starting(server=None)
    assert util.write_error is gunicorn_errors.write_error
    # gunicorn's own maximum, above the API's URL limit so that Django answers (and names) a long URL.
    from smsgw.http.boundary import MAX_URL_BYTES

    assert gunicorn_conf.limit_request_line == 8190 > MAX_URL_BYTES + len("DELETE  HTTP/1.1")
