"""Ledgers behind the tenant limits: one row per (tenant, quota window) and one per rate-limit key."""

from __future__ import annotations

from django.db import models

from smsgw.models import Tenant


class QuotaWindow(models.Model):
    """A tenant's daily quota window (its local day in ``default_timezone``), in segments.

    ``booked``: segments of messages accepted (or made by a schedule) that are due in this window;
    acceptance refuses what would take it over the quota. ``released``: segments handed to the send
    queues during this window; the sweep never lets it pass the quota (limits.execution). Both only move
    by conditional or relative UPDATEs on this row, so concurrent web processes and sweepers agree."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    day = models.DateField()
    booked = models.PositiveIntegerField(default=0)
    released = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "day"], name="quota_window_per_day")]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.day} booked={self.booked} released={self.released}"


class ApiRateBucket(models.Model):
    """GCRA state of one API key's rate limit when no Redis is configured: the theoretical arrival
    time (epoch seconds). Updated by one upsert statement per request (limits.ratelimit)."""

    key = models.CharField(max_length=64, primary_key=True)
    tat = models.FloatField()
    allowed = models.BooleanField(default=True)
    seen = models.FloatField()  # the request's time (epoch seconds), as the statement saw it

    def __str__(self) -> str:
        return self.key
