from django.db import models


class Heartbeat(models.Model):
    """The last time a periodic loop finished a pass (``sweep``), written by whichever process ran it, so
    /readyz and /metrics on any host see the same answer (a per-process or per-host figure would not)."""

    name = models.CharField(max_length=32, primary_key=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} {self.at:%Y-%m-%d %H:%M:%S}"


class QueueConsumer(models.Model):
    """A Celery worker node consuming a queue, as its main process last said (smsgw.observability.consumers):
    ``seen_at`` is refreshed every SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS while it consumes; ``stopped``
    is set, with ``seen_at`` then the time it stopped, when it stops consuming the queue (a warm shutdown,
    a cancelled queue). A row not refreshed for SMSGW_QUEUE_CONSUMER_STALE_SECONDS is a worker that died
    without saying so. In the database, not per host, so every web process gives the same answer."""

    hostname = models.CharField(max_length=255)  # the Celery node name (-n name@host)
    queue = models.CharField(max_length=255)
    seen_at = models.DateTimeField()
    stopped = models.BooleanField(default=False)
    # The worker node's pool at its last beat: its processes (threads, for a threads pool), and how many of
    # them were running a task of any queue it consumes (worker utilisation, /metrics).
    processes = models.PositiveIntegerField(default=0)
    busy = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hostname", "queue"], name="queue_consumer_node")]

    def __str__(self) -> str:
        return f"{self.hostname} {self.queue}"


class UnconsumedQueue(models.Model):
    """When a scrape or a readiness probe first saw this queue with messages ready and no live consumer;
    deleted by the first one that sees it consumed or empty (smsgw.observability.queues)."""

    queue = models.CharField(max_length=255, primary_key=True)
    since = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.queue} since {self.since:%Y-%m-%d %H:%M:%S}"


class ConsoleMinute(models.Model):
    """One minute of the operator console's landing page (reporting.minutes): ``state``, the figures as
    they stood when that minute's pass ran (backlogs, circuits, holds, queues), and ``flows``, what
    happened in it (messages and segments sent per provider, the send lag, failures per provider and
    code), written once the minute closed. A periodic task writes them, so the page reads 60 rows for
    its hour, never the message table's history."""

    minute = models.DateTimeField(primary_key=True)  # its first instant, UTC
    state = models.JSONField(null=True, blank=True)
    flows = models.JSONField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M}"
