from django.db import models


class Heartbeat(models.Model):
    """The last time a periodic loop finished a pass (``sweep``), written by whichever process ran it, so
    /readyz and /metrics on any host see the same answer (a per-process or per-host figure would not)."""

    name = models.CharField(max_length=32, primary_key=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} {self.at:%Y-%m-%d %H:%M:%S}"
