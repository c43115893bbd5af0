"""How long ago the sweep last finished a pass (its heartbeat row), for /readyz and the state gauges."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from smsgw.observability.models import Heartbeat


def sweep_age_seconds(now: datetime | None = None) -> float | None:
    at = Heartbeat.objects.filter(name="sweep").values_list("at", flat=True).first()
    return None if at is None else max(0.0, ((now or timezone.now()) - at).total_seconds())
