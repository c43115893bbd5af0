"""Where the gateway runs: its folders, the environment (development, test, production), the secret key,
the hosts and TLS."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from smsgw.config import security
from smsgw.config.env import env_bool, env_choice, env_int, env_list, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parents[2]
# The folder smsgw writes to (the SQLite database and the filesystem broker of the embedded mode, the
# receipt and inbound spools, metrics files, static files, exports): it must be writable by every smsgw
# process (deploy/systemd: /var/lib/smsgw, the units' StateDirectory).
VAR_DIR = Path(env_str("SMSGW_VAR_DIR", str(BASE_DIR / ".var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# Django's debug pages (tracebacks, settings) on errors: a laptop only, never production.
DEBUG = env_bool("DJANGO_DEBUG", False)
EMBEDDED = not env_secret("DATABASE_URL")
# development: a laptop (the embedded run, benchmarks); test: the test suite; production: everything
# else, and the default as soon as DATABASE_URL is set. Production refuses to start insecurely: a weak
# or missing DJANGO_SECRET_KEY (smsgw.config.security says why), missing provider credentials (the
# provider's package says why).
SMSGW_ENV = env_choice(
    "SMSGW_ENV", "development" if EMBEDDED else "production", ("development", "test", "production")
)
PRODUCTION = SMSGW_ENV == "production"
# Django's signing key (sessions, CSRF, the admin's password resets): in production at least 50 random
# characters, never an example's placeholder (smsgw.config.security); elsewhere a fixed insecure default.
SECRET_KEY = env_secret("DJANGO_SECRET_KEY", "")
if PRODUCTION:
    if problem := security.secret_key_problem(SECRET_KEY):
        raise ImproperlyConfigured(
            f"{problem} (SMSGW_ENV=production). Generate one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
elif not SECRET_KEY:
    SECRET_KEY = "embedded-insecure-key-not-for-production"
# The host names this gateway answers to (comma-separated), e.g. sms.example.com.
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
# Origins the admin's forms may be posted from behind the TLS proxy, e.g. https://sms.example.com.
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
security.placeholders_refuse(
    PRODUCTION,
    DJANGO_ALLOWED_HOSTS=",".join(ALLOWED_HOSTS),
    DJANGO_CSRF_TRUSTED_ORIGINS=",".join(CSRF_TRUSTED_ORIGINS),
)

# --- TLS ------------------------------------------------------------------------------------------
# proxy (production default): TLS ends at a reverse proxy / load balancer that sets X-Forwarded-Proto
# (and strips any such header sent by the client); direct: this process is reached over TLS itself;
# off: plain HTTP (development and test default; in production `check --deploy` then warns).
SMSGW_TLS = env_choice("SMSGW_TLS", "proxy" if PRODUCTION else "off", ("proxy", "direct", "off"))
if SMSGW_TLS == "proxy":
    # The header the proxy sets to "https" on a request that came to it over TLS.
    _proto_header = env_str("SMSGW_PROXY_SSL_HEADER", "X-Forwarded-Proto")
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proto_header.upper().replace("-", "_"), "https")
if SMSGW_TLS != "off":
    SECURE_SSL_REDIRECT = True
    # Load-balancer probes speak plain HTTP to the process; they carry no data.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # Strict-Transport-Security: how long (seconds) browsers remember to use HTTPS only.
    SECURE_HSTS_SECONDS = env_int("SMSGW_HSTS_SECONDS", 31_536_000, minimum=0)
    # HSTS for every subdomain too.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SMSGW_HSTS_INCLUDE_SUBDOMAINS", True)
    # The HSTS header asks to be on the browsers' preload list.
    SECURE_HSTS_PRELOAD = env_bool("SMSGW_HSTS_PRELOAD", True)
