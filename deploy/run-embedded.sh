#!/usr/bin/env bash
# One command, nothing but Python installed: SQLite (WAL), kombu's filesystem transport, the sandbox
# provider, the web API (gunicorn), a real `celery worker` and a real `celery beat`. Ctrl-C stops all.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/bootstrap.sh

# Embedded mode is what an unset DATABASE_URL / CELERY_BROKER_URL means; clear any leftovers.
unset DATABASE_URL CELERY_BROKER_URL
export SMSGW_VAR_DIR="${SMSGW_VAR_DIR:-$PWD/.var}"
export SMSGW_PUBLIC_BASE_URL="${SMSGW_PUBLIC_BASE_URL:-http://127.0.0.1:${SMSGW_WEB_PORT:-8000}}"
WEB_PORT="${SMSGW_WEB_PORT:-8000}"
SANDBOX_PORT="${SMSGW_SANDBOX_PORT:-8081}"
export TWILIO_API_BASE_URL="${TWILIO_API_BASE_URL:-http://127.0.0.1:$SANDBOX_PORT}"
PY=.venv/bin/python

$PY manage.py migrate --noinput -v 0
if [ ! -s "$SMSGW_VAR_DIR/demo-api-key" ]; then
  $PY manage.py tenant_create "Demo" --slug demo --from +14155550100 --timezone America/New_York \
    --if-exists new-key 2>/dev/null | tail -n 1 > "$SMSGW_VAR_DIR/demo-api-key"
fi

pids=()
stop() { trap - INT TERM EXIT; kill -TERM "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop INT TERM EXIT

$PY -m delivery.sandbox --host 127.0.0.1 --port "$SANDBOX_PORT" & pids+=($!)
.venv/bin/gunicorn smsgw.wsgi --bind "127.0.0.1:$WEB_PORT" --workers 2 --access-logfile - --no-control-socket \
    --logger-class smsgw.gunicorn_logging.RedactingLogger & pids+=($!)
# Four processes: the sweep, receipts and webhooks ticks each keep one for most of every second (they
# poll inside it), and sends need the rest; a tick that waits past its expiry is discarded.
.venv/bin/celery -A smsgw worker --loglevel INFO --concurrency 4 --hostname "embedded@%h" \
  --without-gossip --without-mingle \
  -Q sweep,send.transactional,send.bulk,reconcile,receipts,webhooks,campaigns & pids+=($!)
.venv/bin/celery -A smsgw beat --loglevel INFO --scheduler django_celery_beat.schedulers:DatabaseScheduler \
  --pidfile "$SMSGW_VAR_DIR/beat.pid" & pids+=($!)

sleep 2
cat <<MSG

smsgw is running (embedded mode).
  API:      http://127.0.0.1:$WEB_PORT/v1/messages   (reference: /v1/docs, OpenAPI: /v1/openapi.json)
  Sandbox:  $TWILIO_API_BASE_URL   (submissions: /_sandbox/stats)
  API key:  $(cat "$SMSGW_VAR_DIR/demo-api-key")      (also in $SMSGW_VAR_DIR/demo-api-key)
Press Ctrl-C to stop.

MSG
wait -n "${pids[@]}"
echo "a process exited; stopping the rest" >&2
