"""What a group of the provider's answers says of its health, told to the circuit breakers
(delivery.flow.circuit) and to the send rates (delivery.flow.pacing) before the answers are recorded
(delivery.sending.recording): the moves depend on the account circuit's state."""

from __future__ import annotations

from django.utils import timezone

from delivery.flow import circuit, host_circuit, pacing
from delivery.outcomes.table import provider_failure, unanswered
from delivery.providers.base import ErrorClass, ProviderAdapter, SubmitResult


def reason_of(res: SubmitResult) -> str:
    """The provider's answer in one line (a status reason's, a circuit's last error)."""
    title = f" ({res.error_title})" if res.error_title else ""
    return f"{res.http_status or 'network'} {res.error_code}{title} {res.error_message}".strip()[:200]


def answers_report(
    adapter: ProviderAdapter, rows: list[dict], results: list[SubmitResult]
) -> circuit.CircuitState:
    """Tell the circuit breakers how the provider answered, and lower the rate of whatever it throttled
    (AIMD), before the outcomes are recorded (they depend on the account circuit's state). A failure with
    no answer at all counts against this host's circuit instead of the account's when another host got
    answers meanwhile (delivery.flow.circuit): one host cut off does not stop the others."""
    now = timezone.now()
    sent = [res for res in results if res.sent]
    failed = [res for res in sent if provider_failure(res)]
    cut = [res for res in failed if unanswered(res)]
    reached = [res for res in sent if not unanswered(res)]
    probes = [
        res
        for row, res in zip(rows, results, strict=True)
        if row["reason_code"] == circuit.REASON_PROBE and res.sent
    ]
    own = host_circuit.host_report(
        provider=adapter.name,
        account=adapter.account,
        answered=len(reached),
        unanswered=len(cut),
        probe_answered=any(not unanswered(res) for res in probes),
        probe_unanswered=any(unanswered(res) for res in probes),
        error=reason_of(cut[0]) if cut else "",
        now=now,
    )
    ok = len(sent) - len(failed)
    if own:  # this host's own failures: neither the provider's successes nor its failures
        failed = [res for res in failed if not unanswered(res)]
    probe_ok = any(
        row["reason_code"] == circuit.REASON_PROBE and not provider_failure(res)
        for row, res in zip(rows, results, strict=True)
    )
    state = circuit.circuit_report(
        provider=adapter.name,
        account=adapter.account,
        ok=ok,
        failed=len(failed),
        error=reason_of(failed[0]) if failed else "",
        probe_ok=probe_ok,
    )
    _throttles_report(adapter, rows, results)
    return state


def _throttles_report(adapter: ProviderAdapter, rows: list[dict], results: list[SubmitResult]) -> None:
    """One signal per throttled scope (the account, or a sender), with the longest Retry-After given."""
    signals: dict[tuple[str, str], float | None] = {}
    for row, res in zip(rows, results, strict=True):
        if res.error_class == ErrorClass.THROTTLED:
            scope = str(res.scope or "account")
            value = (row["from_number"] or row["sender_pool"]) if scope == "sender" else ""
            key = (scope, value)
            signals[key] = max(signals.get(key) or 0.0, res.retry_after or 0.0) or None
    for (scope, value), retry_after in signals.items():
        pacing.throttle_signal(
            provider=adapter.name, account=adapter.account, scope=scope, value=value, retry_after=retry_after
        )
