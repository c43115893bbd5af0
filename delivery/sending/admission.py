"""What of a batch may be submitted, checked right before the send worker's claim (delivery.sending.worker):
while the account's circuit is open, this host cannot reach the provider, or a hold covers a message, the
rest waits, moves to its route's next leg, or is handed over to another host; and what the claim left of a
paused or cancelled campaign waits or is cancelled."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from delivery.flow import circuit, host_circuit
from delivery.flow import provider_holds as holds_service
from delivery.outcomes import delays
from delivery.routing import failover
from scheduling.campaigns import gate as campaign_gate
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw import stages
from smsgw.stages import Park

# What a row of the batch is read with: the holds' scopes, the parks' and failovers' columns.
ADMISSION_FIELDS = (
    "id",
    "version",
    "status",
    "to",
    "from_number",
    "sender_pool",
    "reason_code",
    "expires_at",
    "route_plan",
    "route_leg",
    "priority",
)


@dataclass
class Admission:
    """A batch split: what may be submitted (``allowed``, of which ``probes`` probe a hold), what waits
    (``parks``) and what moves to its route's next leg (``failovers``: row, why, detail)."""

    allowed: list[int] = field(default_factory=list)
    parks: list[tuple[Mapping[str, Any], Park]] = field(default_factory=list)
    probes: dict[int, holds_service.OpenHold] = field(default_factory=dict)
    failovers: list[tuple[Mapping[str, Any], str, str]] = field(default_factory=list)


def admission_split(
    message_ids: list[int],
    provider: str,
    open_holds: list[holds_service.OpenHold],
    circuit_open: bool,
    now: datetime,
    *,
    host: tuple[str, str] | None = None,
) -> Admission:
    """Split a batch into what may be submitted, what must wait and what moves to its route's next leg:
    everything but the probe while the account's circuit is open; everything but one probe when its turn
    has come while this host's circuit is open (``host``: the provider account it cannot reach), handed
    over to another host's workers (``hand_over``), or parked briefly when no other host reaches the
    provider either; what an open hold covers (a sender or destination hold whose probe is due lets
    exactly one of its messages through; account-wide holds are probed without a message). A message that
    would wait for the account's circuit or a hold and has another leg fails over instead; a host that
    cannot reach the provider is not the provider's failure, so it hands over, never fails over."""
    # Only this provider's messages: one that already moved to another leg is not ours to hold or move.
    rows = Message.objects.filter(pk__in=message_ids, status=Status.QUEUED, provider=provider).values(
        *ADMISSION_FIELDS
    )
    split = _Split(open_holds, now, host)
    for row in rows:
        probe = row["reason_code"] == circuit.REASON_PROBE
        if circuit_open and not probe:
            split.circuit_wait(row)
            continue
        hold = next((h for h in open_holds if _covers(h, row)), None)
        if host is not None and not probe:
            split.host_wait(row, hold)
        else:
            split.hold_pass(row, hold)
    split.finish(provider)
    return split.admission


def _covers(hold: holds_service.OpenHold, row: Mapping[str, Any]) -> bool:
    return hold.matches(to=row["to"], from_number=row["from_number"], sender_pool=row["sender_pool"])


class _Split:
    """One pass over a batch: each row takes one of the ways."""

    def __init__(
        self, open_holds: list[holds_service.OpenHold], now: datetime, host: tuple[str, str] | None
    ) -> None:
        self.admission = Admission()
        self.now = now
        self.host = host
        self.probing: set[int] = set()  # the holds a message of this batch probes
        self.host_probe: Mapping[str, Any] | None = None
        self.handed: list[Mapping[str, Any]] = []
        self.others: bool | None = None  # does another host reach the provider (asked once, if needed)?

    def circuit_wait(self, row: Mapping[str, Any]) -> None:
        """The account's circuit is open: to the next leg, or wait for the circuit."""
        if failover.has_next(row):
            self.admission.failovers.append((row, failover.Why.CIRCUIT, "provider circuit open"))
            return
        until = self.now + timedelta(seconds=delays.circuit_park_delay())
        text = "provider unavailable (circuit open); waiting"
        self.admission.parks.append(
            (row, Park(until, circuit.REASON_UNAVAILABLE, text, "provider_unavailable", {}))
        )

    def host_wait(self, row: Mapping[str, Any], hold: holds_service.OpenHold | None) -> None:
        """This host cannot reach the provider: the host's probe, handed over, or a brief wait."""
        assert self.host is not None
        if (
            hold is None
            and self.host_probe is None
            and host_circuit.host_probe_take(*self.host, now=self.now)
        ):
            self.host_probe = row  # this host's probe: submitted as the account circuit's probes are
            return
        if self.others is None:
            self.others = host_circuit.others_answered(*self.host, host=host_circuit.host_id(), now=self.now)
        if self.others:
            self.handed.append(row)  # published again as it is: a worker of another host takes it
            return
        until = self.now + timedelta(seconds=settings.HOST_CIRCUIT_PARK_SECONDS)
        # The host's name goes in the details (operators see it; the tenant's API drops it), not in the
        # status reason a tenant reads (smsgw.values.actors).
        text = "this host cannot reach the provider; waiting"
        park = Park(until, circuit.REASON_HOST, text, "host_unreachable", {"host": host_circuit.host_id()})
        self.admission.parks.append((row, park))

    def hold_pass(self, row: Mapping[str, Any], hold: holds_service.OpenHold | None) -> None:
        """Allowed, unless a hold covers it: then its probe, to the next leg, or a wait for the hold."""
        admission = self.admission
        if hold is None:
            admission.allowed.append(row["id"])
        elif (
            hold.scope != "account"
            and hold.id not in self.probing
            and hold.next_probe_at <= self.now
            and holds_service.hold_probe_take(hold.id, now=self.now)
        ):
            self.probing.add(hold.id)
            admission.probes[row["id"]] = hold
            admission.allowed.append(row["id"])
        elif failover.has_next(row):
            admission.failovers.append((row, failover.Why.HOLD, hold.describe()))
        else:
            details = {"hold_id": hold.id, "scope": hold.scope, "error_code": hold.error_code}
            park = Park(
                hold.park_until(self.now), holds_service.REASON_HELD, hold.describe(), "held", details
            )
            admission.parks.append((row, park))

    def finish(self, provider: str) -> None:
        if self.host_probe is not None:
            # Marked as a probe (its timeline says so) so that it goes even though every process of this
            # host holds back what it has not sent yet while the host circuit is open (``wanted``).
            marked = transitions.transition_versioned(
                [(self.host_probe["id"], self.host_probe["version"], {})],
                from_status=Status.QUEUED,
                to_status=Status.QUEUED,
                kind="host_probe",
                set_fields={
                    "reason_code": circuit.REASON_PROBE,
                    "status_reason": "probe: can this host reach it?",
                },
                details={"probe": True, "host": host_circuit.host_id()},
                now=self.now,
            )
            self.admission.allowed += marked
        if self.handed:
            hand_over(self.handed, provider=provider, now=self.now)


def hand_over(rows: list[Mapping[str, Any]], *, provider: str, now: datetime) -> None:
    """While this host cannot reach the provider and another host can, its share of a batch is published
    again at once, unchanged (still released, its pacing slot spent once): the next worker to take it is
    as likely to be another host's, and nothing goes back through the release gate, whose slots a parked
    and re-released message would spend again for nothing. One ``host_unreachable`` entry per message
    (the reason says it was handed over); ``run_after`` stays the recovery time, as for any published
    message whose task could be lost."""
    host = host_circuit.host_id()
    fresh: list[tuple[int, int, dict[str, Any]]] = [
        (r["id"], r["version"], {}) for r in rows if r["reason_code"] != circuit.REASON_HOST
    ]
    transitions.transition_versioned(
        fresh,
        from_status=Status.QUEUED,
        to_status=Status.QUEUED,
        kind="host_unreachable",
        set_fields={
            "reason_code": circuit.REASON_HOST,
            "status_reason": "this host cannot reach the provider; handed over to another host",
        },
        details={"host": host, "handed_over": True},
        now=now,
    )
    by_priority: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        by_priority[r["priority"]].append(r["id"])
    for priority, ids in by_priority.items():
        stages.publish_after_commit()(priority, ids, provider=provider)


def halted_skipped(ids: set[int], now: datetime) -> None:
    """Of the batch's messages the claim did not take, those of a paused campaign wait (parked until the
    campaign is resumed, so recovery does not take them for lost tasks), those of a cancelled one are
    cancelled. No query for a batch without campaign messages the claim left."""
    rows = list(
        Message.objects.filter(pk__in=ids, status=Status.QUEUED, campaign__isnull=False).values(
            "id", "version", "status", "reason_code", "expires_at", "campaign_id"
        )
    )
    halted = campaign_gate.halted((r["campaign_id"] for r in rows), lock=True)
    if not halted:
        return
    until = campaign_gate.pause_until(now)
    park = Park(until, campaign_gate.REASON_PAUSED, campaign_gate.PAUSED_TEXT, "campaign_paused", {})
    stages.park_rows()([(r, park) for r in rows if halted.get(r["campaign_id"]) == "paused"], now)
    campaign_gate.cancel_rows([r for r in rows if halted.get(r["campaign_id"]) == "cancelled"], now)
