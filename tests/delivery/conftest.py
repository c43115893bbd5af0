"""Fixtures: one sandbox provider process per test module, the adapter pointed at it by settings."""

from __future__ import annotations

import pytest

from delivery.flow import provider_holds as holds
from delivery.providers import get_adapter
from tests.sandbox_process import SandboxProcess


@pytest.fixture(scope="module")
def sandbox():
    with SandboxProcess() as process:
        yield process


@pytest.fixture
def twilio_settings(settings, sandbox):
    sandbox.reset()
    settings.SMSGW_PROVIDER = "twilio"
    settings.TWILIO_API_BASE_URL = sandbox.base_url
    settings.TWILIO_ACCOUNT_SID = sandbox.account_sid
    settings.TWILIO_AUTH_TOKEN = sandbox.auth_token
    settings.TWILIO_TIMEOUT_SECONDS = 5.0
    settings.SEND_CONCURRENCY = 50
    return settings


@pytest.fixture
def adapter(twilio_settings):
    get_adapter.cache_clear()
    holds._cache.clear()  # open holds are cached per process for a second; tests roll them back
    adapter = get_adapter()
    yield adapter
    get_adapter.cache_clear()
    holds._cache.clear()
