"""Recurring schedules: RRULE parsing, recurrence with DST rules, the API, and the materializer that turns
occurrences into messages."""
