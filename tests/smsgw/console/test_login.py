"""Admin login limits (smsgw.console.login): per username and address, and per username across
addresses (a guess spread over many addresses is stopped too); Django's standard password validators."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-only-1"


def _login(address: str, password: str) -> tuple[int, bool]:
    client = Client(REMOTE_ADDR=address)
    resp = client.post("/admin/login/?next=/admin/", {"username": "ops", "password": password})
    return resp.status_code, "_auth_user_id" in client.session


def test_a_guess_spread_over_many_addresses_locks_the_username_out(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.ADMIN_LOGIN_FAILURES_PER_USER = 6
    User.objects.create_user("ops", "ops@example.com", PASSWORD, is_staff=True, is_superuser=True)
    # Five failures from three addresses: no pair reaches its limit of 3 ...
    for address in ["198.51.100.1", "198.51.100.1", "198.51.100.2", "198.51.100.2", "198.51.100.3"]:
        assert _login(address, "wrong")[0] == 200
    # ... the sixth, from a fourth address, reaches the username's limit of 6: locked out from
    # everywhere, a new address with the right password included.
    assert _login("198.51.100.4", "wrong")[0] == 429
    assert _login("203.0.113.50", PASSWORD) == (429, False)


def test_below_the_username_limit_other_addresses_still_log_in(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.ADMIN_LOGIN_FAILURES_PER_USER = 6
    User.objects.create_user("ops", "ops@example.com", PASSWORD, is_staff=True, is_superuser=True)
    for _ in range(3):
        _login("198.51.100.1", "wrong")
    assert _login("198.51.100.1", PASSWORD) == (429, False), "the pair's own limit still applies"
    assert _login("198.51.100.2", "wrong")[0] == 200  # 4 failures for the username: under 6
    assert _login("203.0.113.50", PASSWORD) == (302, True)


def test_the_per_username_limit_defaults_above_the_pair_limit(settings):
    assert settings.ADMIN_LOGIN_FAILURES_PER_USER >= 4 * settings.AXES_FAILURE_LIMIT


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("short-pw1", "too short"),
        ("password1234", "too common"),
        ("83917264519203", "entirely numeric"),
        ("operations-ops", "too similar"),
    ],
)
def test_weak_operator_passwords_are_refused(password, why):
    user = User(username="operations-ops", email="operations-ops@example.com")
    with pytest.raises(ValidationError) as err:
        validate_password(password, user)
    assert why in " ".join(err.value.messages)


def test_a_long_uncommon_password_is_accepted():
    validate_password("correct horse battery staple", User(username="ops", email="ops@example.com"))
