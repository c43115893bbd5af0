"""The broker transports behind smsgw's URL schemes: kombu's own, with what the gateway needs fixed.

``filesystem://`` (the embedded mode's broker) -> ``FilesystemTransport``:

* **Atomic publish.** kombu's ``filesystem.Channel._put`` creates the message file under its final name and
  only then locks and writes it, so a consumer listing the folder in between opens an empty file, and
  its ``loads`` raises ``JSONDecodeError`` out of ``drain_events``: Celery calls that an "Unrecoverable
  error" and the worker exits (kombu issue #1551, open since 2022; seen here every few minutes on a loaded
  2-core machine, where beat and the worker's own ticks publish every second). Here a message is written
  whole under a temporary name in a sibling folder and ``os.replace``-d into the queue folder: the rename
  is atomic within one filesystem, so a consumer sees either nothing or the complete file.
* **Claim by rename.** kombu moves a file it consumes to the system temporary folder with
  ``shutil.move``, which is a copy and a delete when /tmp is another filesystem (two consumers can then
  both read it). Here the file is renamed into ``claimed/`` beside the queue folder: of two consumers
  exactly one wins the rename; the other finds the file gone and takes the next.
* **A bad file never stops the consumer.** A file that is empty, truncated, not JSON or not a kombu
  message (dropped there by hand, or left by an older writer) is moved to ``bad/``, logged once without
  its contents and counted (``smsgw_broker_discarded_total``); the consumer goes on with the next one.

``redis://``, ``rediss://`` -> ``RedisTransport``: a list item that is not a kombu message (pushed by hand
or by a foreign producer) raised out of kombu's ``_brpop_read`` the same way and stopped the worker; it is
now logged, counted and dropped. The two Redis fixes this module also carries were monkeypatches before.

A message that *is* a kombu message but not a task we know (an unknown task name, a body that does not
decode) is Celery's to judge: ``smsgw.worker.Consumer`` logs it without its contents, counts it and
rejects it without requeue (RabbitMQ then dead-letters it; deploy/rabbitmq/definitions.json).

``transports_register()`` points kombu's scheme aliases at these classes; it runs when ``config.celery`` is
imported, before any connection is made, in every process (web, workers, beat, management commands).
"""

from __future__ import annotations

import binascii
import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem as kombu_filesystem
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

# Why a payload was set aside, as the metric's `reason` label: a bounded set.
EMPTY, NOT_JSON, NOT_A_MESSAGE = "empty", "not_json", "not_a_message"


def discarded_record(*, transport: str, queue: str, reason: str, size: int) -> None:
    """One log line (no contents: a payload may carry ids and metadata) and one count per bad message."""
    from smsgw.observability.events import broker_discarded_count

    log.warning(
        "broker: discarded a %s message on queue %s (%s, %d bytes); the consumer goes on",
        transport,
        queue,
        reason,
        size,
    )
    broker_discarded_count(queue=queue, reason=reason)


def payload_decode(raw: bytes | str) -> tuple[dict | None, str | None]:
    """The kombu message in ``raw``, or None and the reason it is not one.

    A virtual transport's message is the JSON of kombu's envelope: ``properties`` with the
    ``delivery_tag`` assigned at publish, and a body encoded by ``properties["body_encoding"]`` (base64 for
    Celery's). kombu's ``Channel.Message`` would raise on anything else inside the consumer's callback, as
    far out of reach as the decode error itself."""
    if not raw:
        return None, EMPTY
    try:
        payload = loads(bytes_to_str(raw))
    except (ValueError, TypeError, UnicodeDecodeError):
        return None, NOT_JSON
    if not isinstance(payload, dict):
        return None, NOT_A_MESSAGE
    properties = payload.get("properties")
    if not isinstance(properties, dict) or "delivery_tag" not in properties:
        return None, NOT_A_MESSAGE
    body = payload.get("body")
    if body is not None and not isinstance(body, str):
        return None, NOT_A_MESSAGE
    if body and properties.get("body_encoding") == "base64":
        try:
            binascii.a2b_base64(str_to_bytes(body))
        except (binascii.Error, ValueError):
            return None, NOT_A_MESSAGE
    return payload, None


class FilesystemChannel(kombu_filesystem.Channel):
    """kombu's filesystem channel with an atomic publish and a consume that survives bad files."""

    def _broker_folder(self, name: str) -> str:
        # Beside the queue folder, so that every rename between them stays within one filesystem. Made
        # once per channel (a publish costs one write and one rename, not a mkdir as well).
        folders = self.__dict__.setdefault("_smsgw_folders", {})
        if name not in folders:
            folder = Path(self.data_folder_out).parent / name
            folder.mkdir(parents=True, exist_ok=True)
            folders[name] = str(folder)
        return folders[name]

    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        temporary = os.path.join(self._broker_folder("tmp"), name)
        try:
            with open(temporary, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            # A consumer lists only the queue folder: the file appears there whole or not at all. No fsync:
            # the embedded broker survives a killed process (the page cache has the file), not a power
            # cut, and the database re-publishes whatever the broker loses (stale `queued` recovery).
            os.replace(temporary, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        claimed_folder = self._broker_folder("claimed")
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(claimed_folder, filename)
            try:
                os.rename(os.path.join(self.data_folder_in, filename), claimed)
            except FileNotFoundError:
                continue  # another consumer claimed it first
            try:
                with open(claimed, "rb") as f:
                    raw = f.read()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {filename!r} from queue.") from exc
            payload, reason = payload_decode(raw)
            if reason is not None:
                os.replace(claimed, os.path.join(self._broker_folder("bad"), filename))
                discarded_record(transport="filesystem", queue=queue, reason=reason, size=len(raw))
                continue
            os.remove(claimed)
            return payload
        raise Empty()


class FilesystemTransport(kombu_filesystem.Transport):
    Channel = FilesystemChannel
    # kombu keeps exchange bindings in a class attribute shared by every filesystem Transport; ours keeps
    # its own, or a process that also imported kombu's class would see two tables.
    global_state = virtual.BrokerState()


class RedisQoS(kombu_redis.QoS):
    """kombu's Redis QoS removes an acknowledged message from its Redis indices and only then frees the
    prefetch slot it held (kombu/transport/redis.py, QoS.ack: ``_remove_from_indices(...).execute()``
    then ``super().ack``). When that Redis call fails (the link was cut while the task ran), the slot is
    never freed: kombu's Message.ack_log_error logs "Couldn't ack" and swallows the error, and a worker
    whose slots have all leaked never fetches again (the stall in celery/celery#8030, #8091, #3773;
    seen here after a 30-s link cut). The slot is freed whatever Redis answered; the message stays in
    Redis's unacked index and is restored after the visibility timeout, and every task here is
    idempotent on the rows' state, so the copy finds nothing to do."""

    def ack(self, delivery_tag):
        try:
            super().ack(delivery_tag)
        except Exception:
            virtual.QoS.ack(self, delivery_tag)
            raise

    def reject(self, delivery_tag, requeue=False):
        try:
            super().reject(delivery_tag, requeue=requeue)
        except Exception:
            virtual.QoS.ack(self, delivery_tag)  # frees the slot; the message stays in Redis's index
            raise


class RedisChannel(kombu_redis.Channel):
    QoS = RedisQoS

    def _connparams(self, *args, **kwargs):
        """A worker whose broker died closes the broken connection after ``collect()`` has already
        detached its transport (celery consumer.on_connection_error_after_connected); closing the channel
        then tries to restore unacked messages through a client it can no longer build (kombu redis
        ``Channel._connparams``: ``conninfo.hostname`` on None), an AttributeError that ``ignore_errors``
        does not catch: "Unrecoverable error" and the worker exits. Raised as a connection error instead,
        it is ignored like any other failure to close a dead connection; the unacked messages stay in
        Redis's index and are restored after the visibility timeout (or were lost with a Redis restarted
        empty)."""
        import redis

        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("broker connection already collected")
        return super()._connparams(*args, **kwargs)

    def _brpop_read(self, **options):
        # kombu 5.7.0's Channel._brpop_read, with the decode guarded: upstream calls
        # ``self.connection._deliver(loads(item), dest)``, so one item that is not a kombu message raised
        # out of the worker's event loop and stopped it. pyproject.toml pins kombu; re-read this on upgrade.
        try:
            try:
                dest__item = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                # if there's a ConnectionError, disconnect so the next iteration reconnects.
                self.client.connection.disconnect()
                raise
            if not dest__item:
                raise Empty()
            dest, item = dest__item
            dest = bytes_to_str(dest).rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(dest)
            payload, reason = payload_decode(item)
            if reason is not None:
                discarded_record(transport="redis", queue=dest, reason=reason, size=len(item))
                return True  # the item is gone from the list: consumed, not delivered
            self.connection._deliver(payload, dest)
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()

    def _get(self, queue):
        # kombu 5.7.0's Channel._get (basic_get, polling), with the same guard.
        with self.conn_or_acquire() as client:
            for pri in self.priority_steps:
                while (item := client.rpop(self._q_for_pri(queue, pri))) is not None:
                    self._maybe_update_queues_expire(client, queue)
                    payload, reason = payload_decode(item)
                    if reason is None:
                        return payload
                    discarded_record(transport="redis", queue=queue, reason=reason, size=len(item))
            self._maybe_update_queues_expire(client, queue)
            raise Empty()


class RedisTransport(kombu_redis.Transport):
    Channel = RedisChannel


_ALIASES = {
    "filesystem": f"{__name__}:FilesystemTransport",
    "redis": f"{__name__}:RedisTransport",
    "rediss": f"{__name__}:RedisTransport",
}


def transports_register() -> None:
    """Point kombu's URL schemes at the classes above (kombu.transport.TRANSPORT_ALIASES is the table
    ``Connection`` resolves a URL's scheme through; a ``transport=`` argument cannot be used, because a
    URL's scheme overrides it). Dropping a cached resolution makes the change hold even if something
    resolved a scheme first."""
    from kombu import transport as kombu_transport

    for scheme, path in _ALIASES.items():
        kombu_transport.TRANSPORT_ALIASES[scheme] = path
        kombu_transport._transport_cache.pop(scheme, None)
