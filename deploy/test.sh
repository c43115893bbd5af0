#!/usr/bin/env bash
# Install everything and run the whole suite: unit and API tests, integration tests with real
# `celery worker` / `celery beat` processes and the sandbox on PostgreSQL + Redis, and the embedded
# mode's smoke test (SQLite + filesystem transport). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/bootstrap.sh
./deploy/services.sh postgres redis

export DATABASE_URL="${SMSGW_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/smsgw}"
export CELERY_BROKER_URL="${SMSGW_TEST_BROKER_URL:-redis://127.0.0.1:6379/9}"
export DJANGO_SECRET_KEY="test-only-secret"

.venv/bin/ruff check --quiet .
.venv/bin/python manage.py makemigrations --check --dry-run >/dev/null
exec .venv/bin/python -m pytest "$@"
