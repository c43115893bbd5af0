"""Production mode (SMSGW_ENV=production, the default once DATABASE_URL is set) refuses to start
insecurely and passes Django's deployment checklist behind a TLS-terminating proxy. Each case loads the
settings in a fresh interpreter, as a process starting up would."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from smsgw.config import security
from tests.production_env import production_env

ROOT = Path(__file__).resolve().parents[2]


def _env(**overrides: str | None) -> dict[str, str]:
    # SMSGW_ENV is left to its default, which is production once DATABASE_URL is set.
    return production_env(**{"SMSGW_ENV": None, **overrides})


def _run(code: str, **overrides: str | None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_env(**overrides),
        capture_output=True,
        text=True,
        timeout=120,
    )


LOAD = "import django; django.setup(); from django.conf import settings; print(settings.SMSGW_ENV)"


def test_production_is_the_default_with_a_database_url_and_starts_with_strong_settings():
    out = _run(LOAD)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "production"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        (None, "is not set"),
        ("", "is not set"),
        ("bench", "5 characters long"),
        ("test-only-secret", "16 characters long"),
        # a fresh key each run, under a fixed id: every parallel worker collects the same test ids
        pytest.param(
            "django-insecure-" + secrets.token_urlsafe(50), "django-insecure-", id="django-insecure"
        ),
        ("ab" * 40, "distinct characters"),
    ],
)
def test_weak_or_missing_secret_key_stops_start_up(key, why):
    out = _run(LOAD, DJANGO_SECRET_KEY=key)
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and why in out.stderr and "DJANGO_SECRET_KEY" in out.stderr


@pytest.mark.parametrize("env", ["development", "test"])
def test_a_weak_key_is_accepted_outside_production(env):
    out = _run(
        LOAD, SMSGW_ENV=env, DJANGO_SECRET_KEY="bench", TWILIO_ACCOUNT_SID=None, TWILIO_AUTH_TOKEN=None
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == env


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"TWILIO_ACCOUNT_SID": None}, "TWILIO_ACCOUNT_SID must be set"),
        ({"TWILIO_AUTH_TOKEN": None}, "TWILIO_AUTH_TOKEN must be set"),
        ({"TWILIO_ACCOUNT_SID": None, "TWILIO_AUTH_TOKEN": ""}, "TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN"),
        ({"TWILIO_ACCOUNT_SID": "AC123"}, "'AC' followed by 32 hexadecimal digits"),
        ({"TWILIO_ACCOUNT_SID": "SK" + "0" * 32}, "'AC' followed by 32 hexadecimal digits"),
    ],
)
def test_missing_twilio_credentials_stop_start_up(overrides, named):
    out = _run(LOAD, **overrides)
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and named in out.stderr


def test_an_unknown_mode_is_refused():
    out = _run(LOAD, SMSGW_ENV="staging")
    assert out.returncode != 0 and "SMSGW_ENV must be one of" in out.stderr


def test_check_deploy_reports_no_security_warning():
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--tag", "security", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "security.W" not in out.stdout + out.stderr


def test_check_deploy_warns_when_tls_is_switched_off():
    # The control for the test above: the checklist does look at these settings.
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--tag", "security", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=_env(SMSGW_TLS="off"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "security.W008" in out.stderr and "security.W004" in out.stderr


REQUESTS = """
import json, django
django.setup()
from django.test import Client
c = Client()
out = {}
for name, path, headers in [
    ("http_api", "/v1/openapi.json", {}),
    ("proxied_https_api", "/v1/openapi.json", {"HTTP_X_FORWARDED_PROTO": "https"}),
    ("http_health", "/healthz", {}),
]:
    r = c.get(path, **headers)
    out[name] = {"status": r.status_code, "location": r.get("Location", ""),
                 "hsts": r.get("Strict-Transport-Security", "")}
r = c.get("/admin/login/", HTTP_X_FORWARDED_PROTO="https")
out["admin_cookies"] = {k: bool(m["secure"]) for k, m in r.cookies.items()}
print(json.dumps(out))
"""


def test_behind_the_proxy_http_redirects_to_https_and_https_carries_hsts():
    out = _run(REQUESTS)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["http_api"]["status"] == 301
    assert seen["http_api"]["location"] == "https://testserver/v1/openapi.json"
    assert seen["proxied_https_api"]["status"] == 200
    assert seen["proxied_https_api"]["hsts"] == "max-age=31536000; includeSubDomains; preload"
    # Load-balancer probes speak plain HTTP and are not redirected.
    assert seen["http_health"]["status"] == 200
    assert seen["admin_cookies"] == {"csrftoken": True}


# --- placeholders and the providers routes reach (issue 37, "Signed everywhere") ------------------------

EXAMPLE_ENV = ROOT / "deploy" / "systemd" / "smsgw.env.example"
CREDENTIAL = re.compile(r"(SECRET|TOKEN|_SID|_KEY)$")
VONAGE_ROUTE = json.dumps(
    [{"name": "gb", "country": "GB", "legs": [{"provider": "vonage", "sender": "ACME"}]}]
)
VONAGE_READY = {
    "VONAGE_API_KEY": "a1b2c3d4",
    "VONAGE_API_SECRET": secrets.token_hex(16),
    "VONAGE_SIGNATURE_SECRET": secrets.token_hex(24),
    "VONAGE_SIGNATURE_METHOD": "sha256",
}


def _example_credentials() -> list[tuple[str, str]]:
    """Every credential the shipped example sets, commented out or not: (variable, example value)."""
    found = []
    for line in EXAMPLE_ENV.read_text().splitlines():
        match = re.fullmatch(r"#?([A-Z][A-Z0-9_]*)=(.*)", line.strip())
        if match and CREDENTIAL.search(match.group(1)):
            found.append((match.group(1), match.group(2)))
    return found


def test_the_example_file_has_the_placeholders_the_next_test_tries():
    names = {name for name, _ in _example_credentials()}
    assert {
        "DJANGO_SECRET_KEY",
        "TWILIO_ACCOUNT_SID",
        "TWILIO_AUTH_TOKEN",
        "VONAGE_SIGNATURE_SECRET",
    } <= names


@pytest.mark.parametrize(("name", "value"), _example_credentials())
def test_each_placeholder_of_the_example_file_stops_start_up(name, value):
    # Everything else valid, Vonage reached by a route so its variables are checked too.
    out = _run(LOAD, SMSGW_ROUTES=VONAGE_ROUTE, **{**VONAGE_READY, name: value})
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and name in out.stderr, out.stderr


def _example_placeholders() -> list[tuple[str, str]]:
    """Every setting of the shipped example, commented out or not, whose value is a placeholder (a
    CHANGE_ME to replace): (variable, example value)."""
    found = []
    for line in EXAMPLE_ENV.read_text().splitlines():
        match = re.fullmatch(r"#?([A-Z][A-Z0-9_]*)=(.*)", line.strip())
        if match and security.placeholder_problem(*match.groups()):
            found.append((match.group(1), match.group(2)))
    return found


def test_the_example_file_marks_every_value_to_replace():
    names = {name for name, _ in _example_placeholders()}
    assert {
        "CELERY_BROKER_URL",
        "DJANGO_SECRET_KEY",
        "DJANGO_ALLOWED_HOSTS",
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "SMSGW_PUBLIC_BASE_URL",
        "TWILIO_AUTH_TOKEN",
        "VONAGE_SIGNATURE_SECRET",
        "SMSGW_METRICS_TOKEN",
    } <= names


@pytest.mark.parametrize(("name", "value"), _example_placeholders())
def test_each_value_left_as_the_example_says_stops_start_up(name, value):
    """Not only the credentials: a host name, the public URL or a URL's password left as CHANGE_ME stops
    every process, naming the variable and not its value."""
    out = _run(LOAD, SMSGW_ROUTES=VONAGE_ROUTE, **{**VONAGE_READY, name: value})
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and f"{name} is a placeholder" in out.stderr, out.stderr
    assert value not in out.stderr


@pytest.mark.parametrize("name", ["DJANGO_ALLOWED_HOSTS", "SMSGW_PUBLIC_BASE_URL"])
def test_a_placeholder_is_accepted_outside_production(name):
    out = _run(LOAD, SMSGW_ENV="development", **{name: "https://CHANGE_ME.example.com"})
    assert out.returncode == 0, out.stderr


def test_the_same_settings_without_placeholders_start():
    # The control for the test above: only the placeholder was wrong.
    out = _run(LOAD, SMSGW_ROUTES=VONAGE_ROUTE, **VONAGE_READY)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TWILIO_ACCOUNT_SID", "AC" + "0" * 32),  # the Twilio sandbox's (docs/twilio.md)
        ("TWILIO_AUTH_TOKEN", "sandbox-auth-token"),
        ("VONAGE_API_KEY", "abcd1234"),  # the Vonage sandbox's (docs/vonage.md)
        ("VONAGE_API_SECRET", "sandbox-api-secret"),
        # a fresh key each run, under a fixed id: every parallel worker collects the same test ids
        pytest.param("DJANGO_SECRET_KEY", "replace-me-" + secrets.token_urlsafe(50), id="DJANGO_SECRET_KEY"),
    ],
)
def test_a_sandbox_or_placeholder_credential_stops_start_up(name, value):
    out = _run(LOAD, SMSGW_ROUTES=VONAGE_ROUTE, **{**VONAGE_READY, name: value})
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and name in out.stderr, out.stderr


@pytest.mark.parametrize("missing", ["VONAGE_SIGNATURE_SECRET", "VONAGE_API_KEY"])
def test_a_route_to_vonage_without_its_credentials_stops_start_up(missing):
    out = _run(LOAD, SMSGW_ROUTES=VONAGE_ROUTE, **{**VONAGE_READY, missing: None})
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and f"{missing} must be set" in out.stderr, out.stderr


def test_vonage_as_the_default_provider_needs_its_signature_secret():
    out = _run(LOAD, SMSGW_PROVIDER="vonage", **{**VONAGE_READY, "VONAGE_SIGNATURE_SECRET": None})
    assert out.returncode != 0 and "VONAGE_SIGNATURE_SECRET must be set" in out.stderr, out.stderr


def test_a_provider_no_route_reaches_is_not_checked():
    out = _run(LOAD)  # Twilio only: no VONAGE_* at all
    assert out.returncode == 0, out.stderr
