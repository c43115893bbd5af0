"""smsgw.runtime.transports: the embedded broker publishes atomically and sets aside what it cannot read; the
Redis transport drops a list item that is not a kombu message. Real folders and a real Redis; no worker here
(tests/integration/test_bad_broker_messages.py runs real workers against the same faults)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from kombu import Connection, Queue

from smsgw.runtime.transports import FilesystemTransport, RedisTransport, payload_decode, transports_register
from tests.metrics import TOKEN, scrape, value


@pytest.fixture
def metrics_token(settings):
    settings.METRICS_TOKEN = TOKEN


@pytest.fixture
def broker(tmp_path: Path):
    folders = {name: tmp_path / name for name in ("out", "control", "processed")}
    for folder in folders.values():
        folder.mkdir()
    options = {
        "data_folder_in": str(folders["out"]),
        "data_folder_out": str(folders["out"]),
        "control_folder": str(folders["control"]),
        "processed_folder": str(folders["processed"]),
        "store_processed": False,
    }
    with Connection("filesystem://", transport_options=options) as conn:
        yield conn, tmp_path


def _publish(conn, queue: Queue, payload) -> None:
    conn.Producer(channel=conn.default_channel).publish(payload, routing_key=queue.name, declare=[queue])


def _drain(conn, queue: Queue, limit: int = 10_000) -> list:
    got = []
    bound = queue(conn.default_channel)
    for _ in range(limit):
        message = bound.get()
        if message is None:
            return got
        message.ack()
        got.append(message.payload)
    return got


def test_the_filesystem_scheme_resolves_to_smsgws_transport(broker):
    transports_register()
    conn, _ = broker
    assert isinstance(conn.transport, FilesystemTransport)


def test_files_that_are_not_messages_are_set_aside_and_counted_and_the_next_message_is_read(
    broker, db, metrics_token
):
    conn, root = broker
    queue = Queue("t.bad", routing_key="t.bad")
    _publish(conn, queue, {"n": 1})
    before = scrape()
    # What a consumer could find in the folder: a file still empty (kombu#1551's window), one cut short,
    # one that is not JSON, and JSON that is not a kombu message.
    for name, content in (
        ("0_a", b""),
        ("0_b", b'{"body": "eyJ0'),
        ("0_c", b"\xff\xfe not json"),
        ("0_d", b'["a", "list"]'),
    ):
        (root / "out" / f"{name}.t.bad.msg").write_bytes(content)
    _publish(conn, queue, {"n": 2})

    assert _drain(conn, queue) == [{"n": 1}, {"n": 2}]
    assert sorted(p.name for p in (root / "bad").iterdir()) == [
        "0_a.t.bad.msg",
        "0_b.t.bad.msg",
        "0_c.t.bad.msg",
        "0_d.t.bad.msg",
    ]
    assert not list((root / "out").iterdir())
    after = scrape()
    for reason, n in (("empty", 1), ("not_json", 2), ("not_a_message", 1)):
        grown = value(after, "smsgw_broker_discarded_total", queue="t.bad", reason=reason) - value(
            before, "smsgw_broker_discarded_total", queue="t.bad", reason=reason
        )
        assert grown == n, reason


def test_a_publish_is_never_visible_before_it_is_complete(broker):
    """Publishers and a consumer at once on one folder, as beat, the web and the worker are: every message
    is read whole, none is set aside, none is read twice."""
    conn, root = broker
    queue = Queue("t.race", routing_key="t.race")
    _publish(conn, queue, {"n": -1})
    _drain(conn, queue)
    per_thread, threads = 400, 3
    errors: list[BaseException] = []

    def publish(t: int) -> None:
        try:
            with Connection("filesystem://", transport_options=conn.transport_options) as own:
                producer = own.Producer(channel=own.default_channel)
                for i in range(per_thread):
                    producer.publish({"n": t * per_thread + i, "pad": "x" * 2000}, routing_key="t.race")
        except BaseException as exc:
            errors.append(exc)

    publishers = [threading.Thread(target=publish, args=(t,)) for t in range(threads)]
    for thread in publishers:
        thread.start()
    seen: list[int] = []
    bound = queue(conn.default_channel)
    while any(thread.is_alive() for thread in publishers) or len(seen) < per_thread * threads:
        message = bound.get()
        if message is not None:
            message.ack()
            seen.append(message.payload["n"])
        elif not any(thread.is_alive() for thread in publishers) and not list((root / "out").iterdir()):
            break
    for thread in publishers:
        thread.join()
    assert not errors
    assert sorted(seen) == list(range(per_thread * threads))
    assert not (root / "bad").exists() or not list((root / "bad").iterdir())
    assert not list((root / "tmp").iterdir())  # nothing half-written left behind


def test_payload_decode_names_why_a_payload_is_not_a_message():
    good = {"body": "e30=", "properties": {"delivery_tag": "x", "body_encoding": "base64"}}
    assert payload_decode(json.dumps(good).encode()) == (good, None)
    assert payload_decode(b"") == (None, "empty")
    assert payload_decode(b"{") == (None, "not_json")
    assert payload_decode(b'"text"') == (None, "not_a_message")
    assert payload_decode(b'{"properties": {}}') == (None, "not_a_message")
    bad_body = {"body": "not base64!", "properties": {"delivery_tag": "x", "body_encoding": "base64"}}
    assert payload_decode(json.dumps(bad_body).encode()) == (None, "not_a_message")


redis_only = pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("redis"), reason="needs the Redis broker (CELERY_BROKER_URL)"
)
# The embedded broker's tests run in the SQLite half, the Redis broker's in the PostgreSQL half.
pytestmark = [pytest.mark.sqlite, pytest.mark.redis]


@redis_only
def test_redis_list_items_that_are_not_messages_are_dropped_and_counted_and_the_next_is_read(
    db, metrics_token
):
    import redis

    transports_register()
    queue_name = f"t.poison.{uuid.uuid4().hex[:8]}"
    queue = Queue(queue_name, routing_key=queue_name)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    before = scrape()
    with Connection(settings.CELERY_BROKER_URL) as conn:
        assert isinstance(conn.transport, RedisTransport)
        _publish(conn, queue, {"n": 1})
        # kombu's Redis transport LPUSHes and consumes from the right: these come after {"n": 1}.
        for item in (b"", b"{not json", b"[1, 2]"):
            client.lpush(queue_name, item)
        _publish(conn, queue, {"n": 2})
        try:
            assert _drain(conn, queue) == [{"n": 1}, {"n": 2}]
        finally:
            client.delete(queue_name)
    after = scrape()
    for reason, n in (("empty", 1), ("not_json", 1), ("not_a_message", 1)):
        grown = value(after, "smsgw_broker_discarded_total", queue=queue_name, reason=reason) - value(
            before, "smsgw_broker_discarded_total", queue=queue_name, reason=reason
        )
        assert grown == n, reason


def test_the_embedded_settings_create_every_folder_the_transport_renames_between():
    if not settings.BROKER_IS_FILESYSTEM:
        pytest.skip("the embedded broker's settings")
    out = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
    for name in ("tmp", "claimed", "bad"):
        folder = out.parent / name
        assert folder.is_dir()
        assert os.stat(folder).st_dev == os.stat(out).st_dev  # renames stay within one filesystem
