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
out=$(cd "$tmp" && systemd-analyze verify --man=no "${units[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
echo "verify-units: ${#units[@]} units OK"
