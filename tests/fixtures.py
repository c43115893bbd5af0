"""The fixtures every test gets (loaded by the root conftest.py for tests/ and the provider packages' tests)."""

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from tests.factories import tenant_with_key


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hasher():
    """A test-only fast password hasher: Django's PBKDF2 default spends about a third of a second of CPU
    on each password a test sets or checks (console users, admin logins, lockouts). Production keeps
    Django's default (config.settings sets none); what is tested is who may log in, not the hash's cost.
    Processes a test starts (gunicorn, the embedded run) keep the default, so a test that logs in through
    one creates its user there."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture
def tenant_and_key(db):
    return tenant_with_key("acme")


@pytest.fixture
def api(tenant_and_key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_and_key[1]}")
    client.tenant = tenant_and_key[0]
    return client


# Tests about something else than pacing must not wait for Twilio's real per-sender rates (a long code
# sends 1 segment/s): every default is set far above what a test sends. Pacing tests set their own.
UNLIMITED = 100_000.0


@pytest.fixture(autouse=True)
def _fast_capacity_defaults(settings):
    from delivery.flow import capacity, circuit, host_circuit
    from delivery.flow import provider_holds as holds

    settings.SENDER_RATE_DEFAULTS = dict.fromkeys(settings.SENDER_RATE_DEFAULTS, UNLIMITED)
    settings.ACCOUNT_RATE_DEFAULT = UNLIMITED
    capacity.cache_clear()
    holds._cache.clear()
    # Per-process circuit views (buffered successes, the last state seen) must not leak between tests.
    circuit._ok_buffer.clear()
    circuit._local.clear()
    host_circuit._host_ok_buffer.clear()
    host_circuit._host_local.clear()
    yield
    capacity.cache_clear()


@pytest.fixture(autouse=True)
def _no_api_rate_limit(settings):
    """Tests about something else than the API rate limit must not be refused by it (a race test sends
    hundreds of requests from one key); the rate-limit tests set their own limits."""
    settings.API_RATE_PER_SECOND = 0


@pytest.fixture(autouse=True)
def _empty_broker():
    """Each test starts with an empty broker (the sweep asks it how deep the send queues are before it
    re-publishes anything), and in-process sweeps do not run the periodic lost-task check unless a test
    asks for it (scheduling.dispatch.recovery; the integration tests run it in real processes)."""
    from scheduling.dispatch import recovery
    from tests.processes import broker_purge

    broker_purge()
    recovery._last_check = float("inf")
    recovery._backlog_seen.clear()
    yield
    recovery._last_check = 0.0


@pytest.fixture(autouse=True)
def _reslot_thread_closed():
    """The reslot thread (delivery.sending.late) has its own database connection: closed after each test,
    before the test database is flushed or dropped."""
    yield
    from delivery.sending import late

    late.reslotter().stop()


@pytest.fixture(autouse=True)
def _heartbeat_throttle_clear():
    """A process writes each heartbeat at most once per HEARTBEAT_EVERY_SECONDS
    (smsgw.observability.events.heartbeat): a beat an earlier test of this worker wrote, into a database
    since flushed, must not keep this test's from being written."""
    from smsgw.observability import events

    events._last_beat.clear()
    yield


@pytest.fixture(autouse=True)
def _readiness_broker_answer_clear():
    """/readyz keeps the broker's answer for a few seconds per process (smsgw.http.health): a test's
    queue depths must not be the next test's."""
    from smsgw.http.health import broker_check

    broker_check.clear()
    yield
    broker_check.clear()


@pytest.fixture(autouse=True)
def _routes_cache_clear():
    """The routing rules are cached per process for a few seconds (delivery.routing.rules); a rolled-back
    test's rules must not route the next test's messages."""
    from delivery.routing.rules import routes_cache_clear

    routes_cache_clear()
    yield
    routes_cache_clear()
