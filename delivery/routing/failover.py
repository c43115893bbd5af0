"""Failover: a message moves to its route's next leg only when the provider it is on provably did not
take it. The triggers, each decided where it is seen:

* the leg's account or sender is held after an account fault (delivery.flow.provider_holds), at the
  claim, at the release step, or when the fault is the answer;
* the leg's provider circuit is open (delivery.flow.circuit), likewise;
* a transient answer (the provider said it did not process the request) past the leg's retry budget,
  ``SMSGW_FAILOVER_RETRY_ATTEMPTS`` (delivery.sending.recording);
* an uncertain submission that reconciliation proved absent (delivery.sending.reconcile).

Never on an unresolved uncertain submission: it stays ``sending`` on its leg until the reconciler has
found it (sent) or proved it absent. A message on its last leg waits or fails there as it would without
a route. A moved message is ``queued``, due at once, on the next leg's provider and sender, with a fresh
retry budget (``attempt_count`` 0); its timeline says from which leg to which and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status
from smsgw.config.routes import leg_public

KIND = "failover"
COLUMNS = (
    "provider",
    "from_number",
    "sender_pool",
    "route_leg",
    "attempt_count",
    "run_after",
    "reason_code",
    "status_reason",
    "error_code",
)
# What a row handed to ``failover_rows`` must carry.
ROW_FIELDS = ("id", "version", "status", "expires_at", "route_plan", "route_leg")


class Why:
    HOLD = "account_fault"  # the leg's account, sender or destination is held
    CIRCUIT = "circuit_open"  # the leg's provider circuit is open
    RETRIES = "retries_exhausted"  # transient answers past the leg's budget
    ABSENT = "reconciled_absent"  # an uncertain submission the provider proved not to have


def next_leg(row: Mapping[str, Any]) -> tuple[int, dict[str, str]] | None:
    """(index, leg) of the leg after the current one, or None on the last leg (or without a route)."""
    plan = row.get("route_plan") or []
    index = (row.get("route_leg") or 0) + 1
    if index >= len(plan):
        return None
    return index, plan[index]


def has_next(row: Mapping[str, Any]) -> bool:
    return next_leg(row) is not None


def current_leg(row: Mapping[str, Any]) -> dict[str, str] | None:
    plan = row.get("route_plan") or []
    index = row.get("route_leg") or 0
    return plan[index] if index < len(plan) else None


def failover_rows(
    items: Sequence[tuple[Mapping[str, Any], str, str]], *, now: datetime, actor: str = "system"
) -> list[int]:
    """Move each row (``ROW_FIELDS``; all of one status) to its next leg: ``(row, why, detail)``.
    Rows without a next leg are skipped (the caller checked ``has_next``). Compare-and-set on the
    version the caller holds; returns the ids that moved."""
    by_status: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    details: dict[int, dict[str, Any]] = {}
    for row, why, detail in items:
        found = next_leg(row)
        if found is None:
            continue
        index, leg = found
        to = leg_public(leg)
        run_after = min(now, row["expires_at"]) if row.get("expires_at") else now
        text = (
            f"failover to {to['provider']} ({why}: {detail})" if detail else f"failover to {to['provider']}"
        )
        values = {
            "provider": leg["provider"],
            "from_number": leg.get("from", ""),
            "sender_pool": leg.get("pool", ""),
            "route_leg": index,
            "attempt_count": 0,
            "run_after": run_after,
            "reason_code": ReasonCode.FAILOVER,
            "status_reason": text[:255],
            "error_code": "",
        }
        by_status.setdefault(row["status"], []).append((row["id"], row["version"], values))
        previous = current_leg(row)
        details[row["id"]] = {
            "why": why,
            "detail": detail[:200],
            "from_leg": index - 1,
            "to_leg": index,
            "from": leg_public(previous) if previous else {},
            "to": to,
        }
    moved: list[int] = []
    for status, rows in by_status.items():
        moved += transitions.transition_versioned(
            rows,
            from_status=status,
            to_status=Status.QUEUED,
            kind=KIND,
            actor=actor,
            per_row_columns=COLUMNS,
            details=details.get,
            now=now,
        )
    return moved


def circuit_failover(
    ids: Sequence[int], provider: str, opened_at: datetime | None, now: datetime
) -> set[int]:
    """Of these waiting messages (scheduled or queued, on ``provider``, whose circuit is open), move those
    with another leg to it (the release step, rows locked by the caller). Returns the ids moved."""
    rows = list(
        Message.objects.filter(pk__in=list(ids), provider=provider).exclude(route="").values(*ROW_FIELDS)
    )
    since = f"open since {opened_at:%H:%M:%S} UTC" if opened_at else "open"
    items = [(row, Why.CIRCUIT, f"{provider} circuit {since}") for row in rows if has_next(row)]
    return set(failover_rows(items, now=now)) if items else set()
