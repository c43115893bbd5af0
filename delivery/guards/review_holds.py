"""An operator's answer to a velocity review hold (delivery.guards.velocity): release or cancel. The admin
calls these (audited there too, as admin log entries); each moved message gets a timeline entry naming the
operator, and the hold records who closed it, when, and how many messages it moved.

* Release: the held messages become due now (reason ``review_released``: the next release pass lets
  them through without counting or holding them again), and the rule does not hold this tenant's key
  again for the rest of the window the hold opened in.
* Cancel: the held messages end ``cancelled`` (reason ``review_cancelled``).

Only messages still held move: one the tenant cancelled meanwhile, or that expired, stays as it is."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from delivery.guards.models import ReviewHold, ReviewHoldMessage, ReviewState
from delivery.guards.velocity import REASON_CANCELLED, REASON_HELD, REASON_RELEASED
from scheduling.lifecycle import transitions
from scheduling.models import Status


class ReviewHoldClosed(Exception):
    """The hold was already released or cancelled."""


def _held_ids(hold: ReviewHold) -> list[int]:
    return list(
        ReviewHoldMessage.objects.filter(
            hold=hold, message__status=Status.SCHEDULED, message__reason_code=REASON_HELD
        )
        .order_by("message_id")
        .values_list("message_id", flat=True)
    )


def _close(
    hold_id: int, *, state: str, actor: str, now: datetime, to_status: str, kind: str, set_fields
) -> int:
    """Close an open hold: its still-held messages move to ``to_status`` (one timeline entry each), and
    the hold records who closed it, when, and how many moved. ``set_fields(hold)``: the columns set."""
    with transaction.atomic():
        hold = ReviewHold.objects.select_for_update().get(pk=hold_id)
        if hold.state != ReviewState.OPEN:
            raise ReviewHoldClosed(f"review hold {hold_id} is already {hold.state}")
        reason = f"{ReviewState(state).value} by an operator after review"
        moved = len(
            transitions.transition_many(
                _held_ids(hold),
                from_status=Status.SCHEDULED,
                to_status=to_status,
                kind=kind,
                actor=actor,
                details={"review_hold_id": hold.pk, "reason": reason},
                set_fields=set_fields(hold),
                # Only messages still held: one the tenant cancelled meanwhile, or that expired, stays.
                extra_where='"reason_code" = %s',
                extra_params=[REASON_HELD],
                now=now,
            )
        )
        hold.state = state
        hold.closed_at = now
        hold.closed_by = actor
        hold.closed_count = moved
        hold.save(update_fields=["state", "closed_at", "closed_by", "closed_count"])
    return moved


def review_hold_release(hold_id: int, *, actor: str, now: datetime | None = None) -> int:
    """Release the hold's messages (due now). Returns how many moved. Raises ReviewHoldClosed."""
    now = now or timezone.now()
    fields = {
        "run_after": now,
        "reason_code": REASON_RELEASED,
        "status_reason": "released by an operator after review",
    }
    return _close(
        hold_id,
        state=ReviewState.RELEASED,
        actor=actor,
        now=now,
        to_status=Status.SCHEDULED,
        kind="review_released",
        set_fields=lambda hold: fields,
    )


def review_hold_cancel(hold_id: int, *, actor: str, now: datetime | None = None) -> int:
    """Cancel the hold's messages. Returns how many moved. Raises ReviewHoldClosed."""
    now = now or timezone.now()
    return _close(
        hold_id,
        state=ReviewState.CANCELLED,
        actor=actor,
        now=now,
        to_status=Status.CANCELLED,
        kind="cancelled",
        set_fields=lambda hold: {
            "run_after": None,
            "reason_code": REASON_CANCELLED,
            "status_reason": f"cancelled by an operator after review ({hold.describe()})"[:255],
        },
    )
