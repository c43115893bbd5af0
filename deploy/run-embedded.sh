#!/usr/bin/env bash
# One command, nothing but Python installed: SQLite (WAL), kombu's filesystem transport (with an atomic
# publish: smsgw.runtime.transports), every provider's sandbox, the web API (gunicorn), a real `celery worker` and a
# real `celery beat`, supervised. Ctrl-C stops all.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/bootstrap.sh

# Embedded mode is what an unset DATABASE_URL / CELERY_BROKER_URL means; clear any leftovers.
unset DATABASE_URL CELERY_BROKER_URL DATABASE_URL_FILE CELERY_BROKER_URL_FILE
export SMSGW_VAR_DIR="${SMSGW_VAR_DIR:-$PWD/.var}"
# The project's settings (config/settings/) for every Python this script runs, manage.py's included.
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-config.settings}"
export SMSGW_PUBLIC_BASE_URL="${SMSGW_PUBLIC_BASE_URL:-http://127.0.0.1:${SMSGW_WEB_PORT:-8000}}"
WEB_PORT="${SMSGW_WEB_PORT:-8000}"
# Routing (docs/routing.md): UK numbers through Vonage with Twilio as its standby, US numbers through
# Twilio with Vonage as its standby (a leg of weight 0 is reached only by failover), everything else
# through SMSGW_PROVIDER. SMSGW_ROUTES= (empty) turns it off.
DEMO_ROUTES='[{"name": "gb-vonage", "country": "GB", "legs": [{"provider": "vonage", "sender": "SMSGW"}, {"provider": "twilio", "weight": 0}]}, {"name": "us-twilio", "country": "US", "legs": [{"provider": "twilio"}, {"provider": "vonage", "sender": "SMSGW", "weight": 0}]}]'
export SMSGW_ROUTES="${SMSGW_ROUTES-$DEMO_ROUTES}"
PY=.venv/bin/python

$PY manage.py migrate --noinput -v 0
if [ ! -s "$SMSGW_VAR_DIR/demo-api-key" ]; then
  $PY manage.py tenant_create "Demo" --slug demo --from +14155550100 --timezone America/New_York \
    --allowed-countries US,GB \
    --if-exists new-key 2>/dev/null | tail -n 1 > "$SMSGW_VAR_DIR/demo-api-key"
fi
# The demo routes' Vonage legs send from SMSGW: a leg carries only a tenant's own sender (docs/senders.md).
$PY manage.py sender_assign demo SMSGW --provider vonage > /dev/null
# The demo tenant's account SID on the Twilio-compatible API (docs/coming-from-twilio.md).
if [ ! -s "$SMSGW_VAR_DIR/demo-account-sid" ]; then
  $PY manage.py shell -v 0 -c \
    "from smsgw.models import Tenant; print(Tenant.objects.get(slug='demo').facade_account_sid)" \
    > "$SMSGW_VAR_DIR/demo-account-sid"
fi

# Every registered provider's sandbox (delivery/providers/<name>/kit.py says how to run it, on which port:
# SMSGW_SANDBOX_PORT 8081 for Twilio's, SMSGW_VONAGE_SANDBOX_PORT 8082 for Vonage's; docs/vonage.md, "The
# Vonage sandbox"), and the environment the gateway needs to reach it, for the supervisor.
SANDBOXES="$SMSGW_VAR_DIR/sandboxes.json"
$PY -m delivery.providers.kits embedded "$SMSGW_VAR_DIR" > "$SANDBOXES"

BANNER="
smsgw is running (embedded mode).
  API:      http://127.0.0.1:$WEB_PORT/v1/messages   (reference: /v1/docs, OpenAPI: /v1/openapi.json)
@SANDBOXES@
  Routes:   ${SMSGW_ROUTES:-none}   (else ${SMSGW_PROVIDER:-twilio})
  API key:  $(cat "$SMSGW_VAR_DIR/demo-api-key")      (also in $SMSGW_VAR_DIR/demo-api-key)
  Twilio-compatible API: http://127.0.0.1:$WEB_PORT/2010-04-01/Accounts/$(cat "$SMSGW_VAR_DIR/demo-account-sid")/Messages.json
            (account SID in $SMSGW_VAR_DIR/demo-account-sid, the API key as auth token)
A process that dies is started again (its line says so). Press Ctrl-C to stop.

"
# The sandboxes, gunicorn, one celery worker on every queue and celery beat, kept running by a small
# supervisor (deploy/embedded.py): a child that dies is restarted with a backoff; Ctrl-C stops them all.
# The worker consumes every queue the code routes to (smsgw/runtime/queues.py, the one list).
QUEUES=$($PY -c 'from smsgw.runtime.queues import ROUTED_QUEUES; print(",".join(ROUTED_QUEUES))')
exec $PY deploy/embedded.py --var-dir "$SMSGW_VAR_DIR" --web-port "$WEB_PORT" --sandboxes "$SANDBOXES" \
  --queues "$QUEUES" --banner "$BANNER"
