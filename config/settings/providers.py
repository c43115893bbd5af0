"""The providers and what is done about their faults: routing, concurrency, reconciliation, throttling,
holds, capacity, pacing and circuits."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from config.settings.environment import PRODUCTION
from config.settings.pipeline import SENDING_LEASE_SECONDS
from delivery.providers import DEFAULT_PROVIDER, declare_all
from smsgw.config import concurrency, security
from smsgw.config import providers as provider_declarations
from smsgw.config import routes as route_config
from smsgw.config.env import env_bool, env_float, env_int, env_str

# --- provider -------------------------------------------------------------------------------------
# The provider registry (delivery.providers.PROVIDERS) names each provider's package; each package reads
# its own settings from the environment (e.g. its credentials, API base URL and request timeout: see
# docs/deploy.md) and declares its capabilities (smsgw.config.providers). Outside production their
# defaults are the sandbox's (deploy/run-embedded.sh starts it on :8081).
SMSGW_PROVIDER = env_str("SMSGW_PROVIDER", DEFAULT_PROVIDER)
globals().update(declare_all(PRODUCTION))
# Every provider this deployment sends through (the default one and those the settings' routes name:
# ``SMSGW_ROUTES`` below) must answer, or give up, well inside a sending lease: the reconciler must never
# look a message up while its worker may still be waiting on the provider. In production each must also
# have its credentials and the secret its callbacks are verified with, none of them an example's
# placeholder (its package's ``problem``): a receipt or a STOP from a provider we cannot verify is
# either refused or forgeable. A route edited in the admin is checked when it is saved
# (delivery.routing). A registered provider nobody routes to is not checked.
try:
    SMSGW_ROUTES = route_config.parse(
        env_str("SMSGW_ROUTES", ""), provider_declarations.declared(), ("transactional", "bulk")
    )
except route_config.RouteConfigError as exc:
    raise ImproperlyConfigured(f"SMSGW_ROUTES {exc}") from None
for _provider_settings in provider_declarations.settings_in_use(
    {SMSGW_PROVIDER} | route_config.providers_named(SMSGW_ROUTES)
):
    if PRODUCTION and _provider_settings.problem:
        raise ImproperlyConfigured(f"{_provider_settings.problem} (SMSGW_ENV=production)")
    if _provider_settings.request_timeout >= SENDING_LEASE_SECONDS:
        # The reconciler must never look a message up while its worker may still be waiting on the provider.
        raise ImproperlyConfigured(
            f"SMSGW_SENDING_LEASE_SECONDS must be longer than {_provider_settings.request_timeout_setting}"
        )
# Routing rules edited in the admin are read once per this many seconds per process (every message born
# asks for its tenant's), and at once after this process saved one (delivery.routing.rules).
ROUTES_CACHE_SECONDS = env_float("SMSGW_ROUTES_CACHE_SECONDS", 5.0, minimum=0.0)
# Provider requests in flight per send process (smsgw.config.concurrency): SMSGW_SEND_CONCURRENCY when set,
# else an equal share of the provider account's concurrent-request limit over every send process using it.
SEND_CONCURRENCY_PLAN = concurrency.from_env(
    provider_declarations.concurrent_requests({SMSGW_PROVIDER} | route_config.providers_named(SMSGW_ROUTES))
)
SEND_CONCURRENCY = SEND_CONCURRENCY_PLAN.per_process
# The longest request timeout of any provider (a worker's drain, the longest uncertain wait).
PROVIDER_REQUEST_TIMEOUT_SECONDS = provider_declarations.longest_request_timeout()
# Public base URL the provider calls back on (behind a proxy this differs from what Django sees).
SMSGW_PUBLIC_BASE_URL = env_str("SMSGW_PUBLIC_BASE_URL", "")
security.placeholders_refuse(PRODUCTION, SMSGW_PUBLIC_BASE_URL=SMSGW_PUBLIC_BASE_URL)

# --- reconciliation, throttling and holds (delivery) ----------------------------------------------
# An uncertain attempt is first looked up this long after it ended (the provider may still be writing it).
RECONCILE_FIRST_LOOK_SECONDS = env_int("SMSGW_RECONCILE_FIRST_LOOK_SECONDS", 10, minimum=1)
# Absence is only declared after a second look this long after the first found nothing: it outlasts
# the provider's own processing and listing lag (nothing of ours can still be on the wire by then).
RECONCILE_ABSENT_GRACE_SECONDS = env_int("SMSGW_RECONCILE_ABSENT_GRACE_SECONDS", 30, minimum=1)
# The longest the provider's message list may lag behind a stored message. A provider may document no
# freshness guarantee for its list (users report minutes): absence is declared only by a complete listing
# made this long after nothing of the attempt could still arrive (the provider's page in docs/,
# "Uncertain submissions"). A truly absent message is resent after at most the provider's request
# timeout + SMSGW_RECONCILE_ABSENT_GRACE_SECONDS + this (190 s by default).
RECONCILE_LIST_LAG_SECONDS = env_int("SMSGW_RECONCILE_LIST_LAG_SECONDS", 150, minimum=0)
# The shortest wait a tenant may ask for per message (``uncertain_wait_seconds``: a one-time code, where
# late is worse than a rare duplicate): never less than the request timeout plus the processing grace.
RECONCILE_MIN_WAIT_SECONDS = env_int("SMSGW_RECONCILE_MIN_WAIT_SECONDS", 40, minimum=1)
# Pages of 1,000 read per listing; a recipient with more messages than this in the provider's history
# cannot be proven absent (the message waits and ends failed, never sent twice).
RECONCILE_MAX_PAGES = env_int("SMSGW_RECONCILE_MAX_PAGES", 10, minimum=1)
# One reconcile task stops after this long (the rest wait for their lease to run out again), so a slow
# or failing provider never holds a reconcile process for minutes.
RECONCILE_TASK_SECONDS = env_float("SMSGW_RECONCILE_TASK_SECONDS", 20.0, minimum=1.0)
# Throttled by the provider (429, full sender queue): resent after this backoff, not counted as an attempt.
THROTTLE_BASE_SECONDS = env_float("SMSGW_THROTTLE_BASE_SECONDS", 1.0, minimum=0.0)
# The throttle backoff's cap.
THROTTLE_MAX_DELAY_SECONDS = env_float("SMSGW_THROTTLE_MAX_DELAY_SECONDS", 60.0, minimum=0.0)
# Account faults (bad credentials, unregistered sender, geo permission): the scope is held and probed,
# first this long after the hold opened (an account hold keeps this interval).
HOLD_PROBE_FIRST_SECONDS = env_int("SMSGW_HOLD_PROBE_FIRST_SECONDS", 15, minimum=1)
# Sender and destination holds double their probe interval after each refused probe, up to this.
HOLD_PROBE_MAX_SECONDS = env_int("SMSGW_HOLD_PROBE_MAX_SECONDS", 600, minimum=1)
# Beat interval of the account-hold prober (delivery.holds_probe, on the `reconcile` queue), seconds.
HOLDS_PROBE_INTERVAL_SECONDS = env_int("SMSGW_HOLDS_PROBE_INTERVAL", 5, minimum=1)

# --- capacity and pacing (delivery.flow.capacity, delivery.flow.pacing, delivery.flow.circuit) --------------
# Defaults in segments per second by sender type, when a sender has no configured rate: the first
# provider's documented defaults for US/Canada (docs/limits.md, "Sending within limits").
SENDER_RATE_DEFAULTS = {
    "long_code": env_float("SMSGW_RATE_LONG_CODE", 1.0, minimum=0.01),
    "toll_free": env_float("SMSGW_RATE_TOLL_FREE", 3.0, minimum=0.01),
    "short_code": env_float("SMSGW_RATE_SHORT_CODE", 100.0, minimum=0.01),
    "alphanumeric": env_float("SMSGW_RATE_ALPHANUMERIC", 10.0, minimum=0.01),
    "messaging_service": env_float("SMSGW_RATE_MESSAGING_SERVICE", 10.0, minimum=0.01),
}
# The default rate over a whole provider account, segments per second (an account row may set its own).
ACCOUNT_RATE_DEFAULT = env_float("SMSGW_ACCOUNT_RATE", 2000.0, minimum=0.01)
# Off only to measure what pacing costs (bench limiter): every due message is then released at once.
PACING_ENABLED = env_bool("SMSGW_PACING", True)
# Pace a little under the configured rate: a released message reaches the provider after a variable
# delay (broker, worker), and the provider counts what arrives, not what we released.
PACING_HEADROOM = env_float("SMSGW_PACING_HEADROOM", 0.97, minimum=0.1)
# Messages are released with their exact slot, up to this far ahead of it (they are then `sending`, on
# their way): a sweep pass that comes late by less than this loses no capacity, and the slots (not the
# sweep's cadence) set the spacing the provider sees.
PACING_RELEASE_AHEAD_SECONDS = env_float("SMSGW_PACING_RELEASE_AHEAD_SECONDS", 1.0, minimum=0.1)
# A message that waits for a limit gets a slot at least this far from the pass that releases it: the time
# for the pass to commit and a worker to pick the batch up (a slot already past on arrival would crowd
# the next one). A message its limits let go at once has no slot and goes immediately.
PACING_DISPATCH_SECONDS = env_float("SMSGW_PACING_DISPATCH_SECONDS", 0.35, minimum=0.0)
if PACING_DISPATCH_SECONDS >= PACING_RELEASE_AHEAD_SECONDS:
    raise ImproperlyConfigured(
        "SMSGW_PACING_DISPATCH_SECONDS must be below SMSGW_PACING_RELEASE_AHEAD_SECONDS"
    )
# Within a constrained account, bulk keeps at least this share of each pass while transactional waits.
PACING_BULK_MIN_SHARE = env_float("SMSGW_PACING_BULK_MIN_SHARE", 0.1, minimum=0.0)
# Backpressure (AIMD): a throttle multiplies the rate by this (at most once per cooldown), and the rate
# climbs back by this fraction of the configured rate per second, never above it or below the floor.
AIMD_DECREASE = env_float("SMSGW_AIMD_DECREASE", 0.7, minimum=0.05)
# The climb back per second, as a fraction of the configured rate.
AIMD_INCREASE_PER_SECOND = env_float("SMSGW_AIMD_INCREASE_PER_SECOND", 0.03, minimum=0.0)
# At most one decrease per this many seconds.
AIMD_COOLDOWN_SECONDS = env_float("SMSGW_AIMD_COOLDOWN_SECONDS", 1.0, minimum=0.0)
# The rate never falls below this fraction of the configured rate.
AIMD_FLOOR = env_float("SMSGW_AIMD_FLOOR", 0.05, minimum=0.0)
# Circuit breaker per provider account: opens when, within the window, at least MIN_FAILURES requests
# failed (timeouts, connection errors, 5xx) and they were at least RATIO of the answers; while open, one
# probe message per PROBE_SECONDS; waiting messages are parked and released when it closes.
CIRCUIT_WINDOW_SECONDS = env_float("SMSGW_CIRCUIT_WINDOW_SECONDS", 10.0, minimum=0.1)
# The fewest failed requests within the window that open the circuit.
CIRCUIT_MIN_FAILURES = env_int("SMSGW_CIRCUIT_MIN_FAILURES", 5, minimum=1)
# The least share of failed answers within the window that opens it.
CIRCUIT_FAILURE_RATIO = env_float("SMSGW_CIRCUIT_FAILURE_RATIO", 0.5, minimum=0.0)
# The circuit also opens as soon as this many requests in a row failed for the provider's reasons (an
# outage).
CIRCUIT_STREAK_FAILURES = env_int("SMSGW_CIRCUIT_STREAK_FAILURES", 20, minimum=1)
# While open, one probe message per this many seconds.
CIRCUIT_PROBE_SECONDS = env_float("SMSGW_CIRCUIT_PROBE_SECONDS", 1.0, minimum=0.1)
# How long a message waiting on an open circuit is parked (released at once when it closes).
CIRCUIT_PARK_SECONDS = env_int("SMSGW_CIRCUIT_PARK_SECONDS", 30, minimum=1)
# The host circuit (delivery.flow.circuit): this host cannot reach the provider (no answer at all:
# connection refused or timed out, read timeouts) while another host gets answers within the window. The
# same thresholds open it; while open this host's workers park their batches for HOST_CIRCUIT_PARK_SECONDS
# (another host's worker takes them) and send one probe after PROBE_SECONDS, doubling up to PROBE_MAX.
# HOST_ID names this host (default: the machine's hostname): processes with the same id share a circuit.
HOST_ID = env_str("SMSGW_HOST_ID", "")[:128]
# A cut-off host's first probe wait (it doubles after each failed probe) ...
HOST_CIRCUIT_PROBE_SECONDS = env_float("SMSGW_HOST_CIRCUIT_PROBE_SECONDS", 2.0, minimum=0.1)
# The cut-off host's probe wait stops doubling here.
HOST_CIRCUIT_PROBE_MAX_SECONDS = env_float("SMSGW_HOST_CIRCUIT_PROBE_MAX_SECONDS", 30.0, minimum=0.1)
# How long a cut-off host parks a batch for another host to take.
HOST_CIRCUIT_PARK_SECONDS = env_float("SMSGW_HOST_CIRCUIT_PARK_SECONDS", 2.0, minimum=0.1)
