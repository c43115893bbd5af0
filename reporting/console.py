"""The operator console's landing page (``/admin/``, config.admin_site): health at a glance. For now and
the last hour: the due backlog and its oldest age, the send lag, messages and segments per minute by
provider, failures by provider and error code, open circuits and holds, queues without a consumer, the
inbound and webhook backlogs. Each figure is a number, a small chart (reporting.sparklines) and a link
to the admin list behind it, filtered.

Figures come from reporting.minutes (bounded queries now, one row per minute for the hour). A person
sees a figure only with the view permission of the list it links to (smsgw.console.roles): the page
says nothing the lists would not. It shows counts, ages, provider names and error codes: never a
number or a body.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from reporting.minutes import HOUR_MINUTES, hour_read, lag_hour, minute_floor, state_read
from reporting.sparklines import sparkline
from reporting.state import EXACT_BELOW

FAILURE_ROWS = 10  # the provider and code pairs shown, most failures in the hour first
STALE_MINUTES = 3  # the minute figures are called stale when the newest is older than this
# (permission, figure, label, admin list, its filter): open circuits and holds.
OPEN = {"state__exact": "open"}
CIRCUIT_ROWS = (
    (
        "delivery.view_providercircuit",
        "circuits_open",
        "open provider circuits",
        "delivery_providercircuit",
        OPEN,
    ),
    (
        "delivery.view_providerhostcircuit",
        "host_circuits_open",
        "open host circuits",
        "delivery_providerhostcircuit",
        OPEN,
    ),
    (
        "delivery.view_providerhold",
        "holds_open",
        "open provider holds",
        "delivery_providerhold",
        {"state": "open"},
    ),
    ("delivery.view_reviewhold", "review_holds_open", "open review holds", "delivery_reviewhold", OPEN),
)


@dataclass
class Row:
    key: str  # data-figure on the page: what the tests read
    label: str
    now: float | None
    hour: float | None
    spark: SafeString
    url: str = ""
    unit: str = ""  # "s": an age or a lag, shown as one
    approx_hour: bool = False  # from histograms (within 10 %), or a peak of estimates
    # A count that reached EXACT_BELOW is the planner's estimate (reporting.state.count).
    approx_now: bool = False

    @property
    def now_text(self) -> str:
        text = figure_text(self.now, self.unit)
        return f"≈ {text}" if self.approx_now else text

    @property
    def hour_text(self) -> str:
        text = figure_text(self.hour, self.unit)
        return f"≈ {text}" if self.approx_hour and self.hour else text


@dataclass
class Panel:
    key: str
    title: str
    now_label: str
    hour_label: str
    rows: list[Row] = field(default_factory=list)
    note: str = ""


def figure_text(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "s":
        return age_text(value)
    return f"{value:,.0f}"


def age_text(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.2f} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _list_url(model: str, **params: str) -> str:
    url = reverse(f"admin:{model}_changelist")
    return f"{url}?{urlencode(params)}" if params else url


class _Hour:
    """The hour's minute rows as series: one value per minute, None where no row was written."""

    def __init__(self, now: datetime):
        rows = hour_read(now)
        self.states = [state for _, state, _ in rows]
        self.flows = [flows for _, _, flows in rows]
        self.minutes = [m for m, _, _ in rows]
        written = [m for m, state, flows in rows if state is not None or flows is not None]
        self.newest = max(written) if written else None
        # The last closed minute with flows: "now" for the rates and the lag.
        self.last_flows = next((f for f in reversed(self.flows) if f is not None), None)

    def state(self, name: str) -> list[float | None]:
        return [None if s is None else s.get(name) for s in self.states]

    def flow(self, kind: str, key: str) -> list[float | None]:
        return [None if f is None else f.get(kind, {}).get(key, 0) for f in self.flows]

    def lag(self, q: str) -> list[float | None]:
        # A minute without a send has no lag: a gap on the chart, not a zero.
        return [((f or {}).get("lag") or {}).get(q) for f in self.flows]

    def totals(self, kind: str) -> Counter:
        total: Counter = Counter()
        for f in self.flows:
            total.update((f or {}).get(kind, {}))
        return total


def _peak(values: list[float | None], now: float | None = None) -> float | None:
    known = [v for v in values if v is not None] + ([now] if now is not None else [])
    return max(known) if known else None


def _gauge(hour: _Hour, key: str, label: str, now: float, url: str, unit: str = "") -> Row:
    series = hour.state(key)
    peak = _peak(series, now)
    row = Row(key, label, now, peak, sparkline(series, label=label), url, unit)
    row.approx_now = not unit and now >= EXACT_BELOW
    row.approx_hour = not unit and (peak or 0) >= EXACT_BELOW
    return row


def _due_panel(hour: _Hour, state: dict) -> Panel:
    url = _list_url("scheduling_message", due="now")
    return Panel(
        "due",
        "Due backlog",
        "now",
        "peak, last hour",
        [
            _gauge(hour, "due", "scheduled messages already due", state["due"], url),
            _gauge(hour, "due_oldest", "oldest due for", state["due_oldest"], url, "s"),
        ],
    )


def _lag_panel(hour: _Hour) -> Panel:
    p50, p99, n = lag_hour(hour.flows)
    last = (hour.last_flows or {}).get("lag") or {}
    url = _list_url("scheduling_message", sent="1h")
    rows = [
        Row(
            "lag_p50",
            "p50 (sent - due)",
            last.get("p50"),
            p50 if n else None,
            sparkline(hour.lag("p50"), label="p50"),
            url,
            "s",
            True,
        ),
        Row(
            "lag_p99",
            "p99",
            last.get("p99"),
            p99 if n else None,
            sparkline(hour.lag("p99"), label="p99"),
            url,
            "s",
            True,
        ),
    ]
    return Panel("lag", "Send lag", "last minute", f"last hour ({n:,} sent)", rows)


def _throughput_panel(hour: _Hour) -> Panel:
    last = hour.last_flows or {}
    rows: list[Row] = []
    for kind, what in (("sent", "messages"), ("segments", "segments")):
        totals = hour.totals(kind)
        for provider in sorted(totals):
            url = _list_url("scheduling_message", sent="1h", provider=provider)
            rows.append(
                Row(
                    f"{kind}:{provider}",
                    f"{what}, {provider}",
                    last.get(kind, {}).get(provider, 0),
                    totals[provider],
                    sparkline(hour.flow(kind, provider), label=f"{what} per minute, {provider}"),
                    url,
                )
            )
    note = "" if rows else "Nothing sent in the last hour."
    return Panel("throughput", "Sent per minute, by provider", "last minute", "last hour", rows, note)


def _failures_panel(hour: _Hour) -> Panel:
    totals = hour.totals("failed")
    last = (hour.last_flows or {}).get("failed", {})
    rows: list[Row] = []
    for key, n in sorted(totals.items(), key=lambda i: (-i[1], i[0]))[:FAILURE_ROWS]:
        provider, _, code = key.partition("|")
        params = {"failed": "1h", "provider": provider}
        if code != "-":
            params["error_code"] = code
        rows.append(
            Row(
                f"failed:{key}",
                f"{provider}, code {code if code != '-' else '(none)'}",
                last.get(key, 0),
                n,
                sparkline(hour.flow("failed", key), label=f"failures, {provider} {code}"),
                _list_url("scheduling_message", **params),
            )
        )
    more = len(totals) - len(rows)
    note = f"and {more} more codes" if more > 0 else ("" if rows else "No failures in the last hour.")
    return Panel("failures", "Failures by provider and error code", "last minute", "last hour", rows, note)


def _circuits_panel(user, hour: _Hour, state: dict) -> Panel:
    rows: list[Row] = []
    for perm, key, label, model, params in CIRCUIT_ROWS:
        if user.has_perm(perm):
            rows.append(_gauge(hour, key, label, state[key], _list_url(model, **params)))
    detail = state["detail"]
    parts = [f"{p} (circuit)" for p in sorted({p for p, _ in detail["circuits"]})]
    parts += [f"{p}: {n} held" for p, n in detail["holds"].items()]
    return Panel("circuits", "Open circuits and holds", "now", "peak, last hour", rows, "; ".join(parts))


def _queues_panel(hour: _Hour, state: dict) -> Panel:
    url = _list_url("observability_unconsumedqueue")
    row = _gauge(
        hour, "queues_unconsumed", "queues with messages and no consumer", state["queues_unconsumed"], url
    )
    note = "; ".join(
        f"{name}: {ready:,} waiting for {age_text(seconds)}"
        for name, ready, seconds in state["detail"]["queues"]
    )
    return Panel("queues", "Queues without a consumer", "now", "peak, last hour", [row], note)


def _backlog_panel(user, hour: _Hour, state: dict) -> Panel:
    rows: list[Row] = []
    if user.has_perm("inbound.view_inboundmessage"):
        url = _list_url("inbound_inboundmessage", state__exact="pending")
        rows.append(
            _gauge(hour, "inbound_pending", "inbound messages not processed", state["inbound_pending"], url)
        )
        rows.append(
            _gauge(hour, "inbound_oldest", "oldest inbound waiting for", state["inbound_oldest"], url, "s")
        )
    if user.has_perm("receipts.view_webhookdelivery"):
        url = _list_url("receipts_webhookdelivery", status__exact="pending")
        rows.append(_gauge(hour, "webhook_outbox", "webhooks not delivered", state["webhook_outbox"], url))
        rows.append(
            _gauge(hour, "webhook_oldest", "oldest webhook waiting for", state["webhook_oldest"], url, "s")
        )
    return Panel("backlogs", "Inbound and webhook backlog", "now", "peak, last hour", rows)


def landing_context(request, *, now: datetime | None = None) -> dict:
    """What the landing page shows to ``request.user``: the panels their role may see."""
    now = now or timezone.now()
    user = request.user
    hour = _Hour(now)
    state = state_read(now)
    panels: list[Panel] = []
    if user.has_perm("scheduling.view_message"):
        panels += [_due_panel(hour, state), _lag_panel(hour), _throughput_panel(hour), _failures_panel(hour)]
    panels.append(_circuits_panel(user, hour, state))
    if user.has_perm("observability.view_unconsumedqueue"):
        panels.append(_queues_panel(hour, state))
    panels.append(_backlog_panel(user, hour, state))
    panels = [p for p in panels if p.rows or (p.note and p.key in ("throughput", "failures"))]
    stale = hour.newest is None or (minute_floor(now) - hour.newest).total_seconds() > STALE_MINUTES * 60
    return {
        "console_panels": panels,
        "console_now": now,
        "console_newest_minute": hour.newest,
        "console_stale": stale,
        "console_hour_minutes": HOUR_MINUTES,
    }
