"""Worked examples for the API reference (/v1/docs): the common calls, as a tenant would write them."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

SEND_NOW = OpenApiExample(
    "Send now",
    value={"to": "+14155550123", "body": "Your code is 123456"},
    request_only=True,
)
SEND_AT_LOCAL_TIME = OpenApiExample(
    "Send at a local time in a timezone",
    description="09:00 on the wall clock in New York, whatever the offset that day (DST included).",
    value={
        "to": "+14155550123",
        "body": "Your appointment is at 10:00.",
        "send_at": "2026-12-24T09:00:00",
        "timezone": "America/New_York",
        "priority": "transactional",
        "metadata": {"appointment": "A-1042"},
    },
    request_only=True,
)
SEND_AT_INSTANT = OpenApiExample(
    "Send at an exact instant",
    description="With an offset (or Z), `send_at` is that instant and `timezone` is not needed.",
    value={"to": "+14155550123", "body": "Maintenance starts now.", "send_at": "2026-12-24T14:00:00Z"},
    request_only=True,
)
RESCHEDULE = OpenApiExample(
    "Reschedule",
    value={"send_at": "2026-12-24T10:30:00", "timezone": "America/New_York"},
    request_only=True,
)
RECURRING = OpenApiExample(
    "Every weekday at 08:30 in Berlin",
    description="RRULEs are evaluated in local wall time: 08:30 stays 08:30 across DST.",
    value={
        "to": "+4915112345678",
        "body": "Stand-up in 30 minutes.",
        "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;UNTIL=20270630T215959Z",
        "start": "2026-12-01T08:30:00",
        "timezone": "Europe/Berlin",
        "exdate": ["2026-12-25", "2027-01-01"],
    },
    request_only=True,
)
QUIET_HOURS = OpenApiExample(
    "Quiet from 21:00 to 08:00",
    value={"start": "21:00", "end": "08:00", "exempt_transactional": True},
    request_only=True,
)
BATCH = OpenApiExample(
    "Many messages in one request",
    description="Each item is what `POST /v1/messages` takes, with its own optional `idempotency_key`; "
    "each gets its own `status` in `results`, in order.",
    value={
        "messages": [
            {"to": "+14155550123", "body": "Your code is 123456", "idempotency_key": "otp-8842"},
            {
                "to": "+447700900123",
                "body": "Your parcel arrives tomorrow.",
                "send_at": "2026-12-24T09:00:00",
                "timezone": "Europe/London",
                "idempotency_key": "parcel-17",
            },
        ]
    },
    request_only=True,
)
