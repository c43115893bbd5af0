#!/usr/bin/env bash
# Check the systemd units with `systemd-analyze verify`: syntax, every directive known, every ExecStart
# executable present. The units name the installed path /opt/smsgw; the check rewrites it to this
# checkout (its .venv must exist: deploy/bootstrap.sh). Any message at all fails the check, since
# systemd-analyze reports unknown or unparsable directives as warnings with exit status 0.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v systemd-analyze >/dev/null || { echo "verify-units: systemd-analyze not found (apt-get install systemd)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in deploy/systemd/*.service deploy/systemd/*.target; do
  sed "s#/opt/smsgw#$PWD#g" "$f" > "$tmp/$(basename "$f")"
done
units=(smsgw.target smsgw-migrate.service smsgw-web.service smsgw-beat.service smsgw-sandbox.service)
for q in sweep send.transactional send.bulk receipts webhooks reconcile campaigns retention; do
  units+=("smsgw-worker@$q.service")
done
# What systemd-analyze cannot see: a unit running as `smsgw` over the root-owned checkout must be able to
# write what smsgw writes. Its var folder (spools, metrics, static files, exports: every path the settings
# write is under SMSGW_VAR_DIR, tests/smsgw/runtime/test_units.py) is the units' StateDirectory, which
# systemd makes and gives to User=; a pid file goes in the unit's own RuntimeDirectory.
for f in deploy/systemd/*.service; do
  grep -qx 'User=smsgw' "$f" || continue
  for line in 'StateDirectory=smsgw' 'Environment=SMSGW_VAR_DIR=/var/lib/smsgw'; do
    grep -qx "$line" "$f" || { echo "verify-units: $f runs as smsgw without $line: it cannot write its var folder" >&2; exit 1; }
  done
  for pid in $(grep -o -- '--pidfile [^ ]*' "$f" | cut -d' ' -f2); do
    dir=$(dirname "$pid"); dir=${dir#/run/}
    grep -qx "RuntimeDirectory=$dir" "$f" || { echo "verify-units: $f writes $pid without RuntimeDirectory=$dir" >&2; exit 1; }
  done
done
# Every secret setting (smsgw.config.reference.secret_names: the ones read by env_secret) may be a systemd
# credential: each unit running smsgw's code loads all of them, by name, from the credential store.
secrets=$(DJANGO_SECRET_KEY=verify-units SMSGW_ENV=test .venv/bin/python -c \
  'from smsgw.config.reference import secret_names; print(*secret_names())')
[ -n "$secrets" ] || { echo "verify-units: no secret settings found" >&2; exit 1; }
for f in deploy/systemd/smsgw-web.service deploy/systemd/smsgw-worker@.service deploy/systemd/smsgw-beat.service \
  deploy/systemd/smsgw-migrate.service; do
  for name in $secrets; do
    grep -qx "LoadCredential=$name:smsgw.$name" "$f" || { echo "verify-units: $f does not load the credential $name (LoadCredential=$name:smsgw.$name)" >&2; exit 1; }
  done
done
if grep -q '^SMSGW_VAR_DIR=' deploy/systemd/smsgw.env.example; then
  echo "verify-units: smsgw.env.example sets SMSGW_VAR_DIR: the units' StateDirectory is the place" >&2; exit 1
fi
out=$(cd "$tmp" && systemd-analyze verify --man=no "${units[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
echo "verify-units: ${#units[@]} units OK"
