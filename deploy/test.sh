#!/usr/bin/env bash
# Install everything and run the whole suite: unit and API tests, integration tests with real
# `celery worker` / `celery beat` processes and the sandbox on PostgreSQL + Redis, and the embedded
# mode's smoke test (SQLite + filesystem transport). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/bootstrap.sh
./deploy/services.sh postgres redis rabbitmq

# The official Twilio Node SDK, pinned by tests/node/package-lock.json, for
# tests/integration/test_twilio_node_sdk.py (from the npm registry). Without npm that test is skipped,
# saying so.
if command -v npm >/dev/null; then npm ci --prefix tests/node --no-audit --no-fund >/dev/null; fi

# The admin's browser tests (tests/admin_ui) drive Debian's Chromium through Playwright; Playwright's
# own browser download is never used (it needs the network). Without /usr/bin/chromium they are
# skipped, saying so; as root this installs it.
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
# The layers point one way (pyproject.toml, [tool.importlinter]).
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
# Types of the app packages (pyproject.toml, [tool.mypy]: the stubs, the strict modules, the ignore list).
DJANGO_SECRET_KEY=type-check-only .venv/bin/mypy
.venv/bin/python manage.py makemigrations --check --dry-run >/dev/null
DJANGO_SECRET_KEY=test-only-secret .venv/bin/python manage.py spectacular --validate --fail-on-warn --file /dev/null

# The docs site (docs/, mkdocs.yml) builds with every link and anchor resolved: strict turns each warning
# into a failure. Built into a temporary folder, with no network (no fonts or plugins fetched). Not with
# --quiet: it hides the warnings, and then strict has none to fail on; the log is shown when it fails.
DOCS_SITE="$(mktemp -d)"
if ! NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d "$DOCS_SITE/site" >"$DOCS_SITE/build.log" 2>&1; then
  cat "$DOCS_SITE/build.log" >&2
  exit 1
fi
rm -rf "$DOCS_SITE"

# Production settings pass Django's deployment checklist (TLS behind a proxy, HSTS, secure cookies) and
# every other system check without a warning. Nothing connects to these; they only load the settings.
SMSGW_ENV=production DATABASE_URL=postgres://postgres@127.0.0.1:5432/smsgw \
  DJANGO_SECRET_KEY="$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
  TWILIO_ACCOUNT_SID="AC$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(16))')" \
  TWILIO_AUTH_TOKEN="$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(16))')" \
  .venv/bin/python manage.py check --deploy --fail-level WARNING

# The systemd units parse, and every ExecStart exists in this checkout's .venv.
./deploy/verify-units.sh >/dev/null

# The Prometheus alert rules parse and fire as their unit tests say (promtool is in Debian's
# `prometheus` package; installed here when missing).
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y -q prometheus >/dev/null; else sudo apt-get install -y -q prometheus >/dev/null; fi
fi
promtool check rules deploy/prometheus/alerts.yml
(cd deploy/prometheus && promtool test rules alerts.test.yml)

# 1. Embedded mode's database: everything that does not span processes, on SQLite (WAL).
env -u DATABASE_URL -u CELERY_BROKER_URL SMSGW_VAR_DIR="$(mktemp -d)" \
  .venv/bin/python -m pytest -q -m "not integration" -p no:cacheprovider

# 2. The whole suite on PostgreSQL + Redis, real worker/beat/sandbox processes included.
export DATABASE_URL="${SMSGW_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/smsgw}"
export CELERY_BROKER_URL="${SMSGW_TEST_BROKER_URL:-redis://127.0.0.1:6379/9}"
export DJANGO_SECRET_KEY="test-only-secret" SMSGW_ENV=test
exec .venv/bin/python -m pytest "$@"
