#!/usr/bin/env bash
# Install the pinned dependencies (uv.lock) into .venv. Idempotent; needs only Python >= 3.12.6 and
# access to PyPI. Set SMSGW_PYTHON to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest interpreter smsgw runs on; the same floor as requires-python in pyproject.toml
# (tests/smsgw/test_python_floor.py checks both). Django 6.1 needs 3.12; 3.12.4 fixed ipaddress's
# is_private/is_global ranges (CVE-2024-4032: the webhook guard's idea of a private address) and 3.12.6
# the quadratic parsing of quoted cookie values (CVE-2024-7592: one admin request holding a core).
# 3.13.0 and later have both.
MIN_PYTHON=3.12.6

version_of() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null; }
# At least MIN_PYTHON, compared field by field as numbers (3.12.10 is newer than 3.12.6).
at_least() {
  local IFS=.
  local -a have=($1) want=($MIN_PYTHON)
  local i
  for i in 0 1 2; do
    ((${have[i]:-0} > ${want[i]})) && return 0
    ((${have[i]:-0} < ${want[i]})) && return 1
  done
  return 0
}
ok() { local v; v=$(version_of "$1") && [ -n "$v" ] && at_least "$v"; }

find_python() {
  local c v seen=""
  # The interpreter .venv is made with (default: the first Python >= 3.12.6 found on PATH or in pyenv).
  if [ -n "${SMSGW_PYTHON:-}" ]; then
    # Asked for by name: that one or none, never a silent fallback to another interpreter.
    v=$(version_of "$SMSGW_PYTHON") || v=""
    if [ -n "$v" ] && at_least "$v"; then command -v "$SMSGW_PYTHON"; return; fi
    echo "smsgw needs Python >= $MIN_PYTHON; SMSGW_PYTHON=$SMSGW_PYTHON is ${v:-not a working Python}" \
      "(older 3.12 releases lack the ipaddress and cookie-parsing security fixes)" >&2
    return 1
  fi
  for c in python3.13 python3.12 python3 python; do
    command -v "$c" >/dev/null 2>&1 || continue
    ok "$c" && { command -v "$c"; return; }
    v=$(version_of "$c") && seen="$seen $c=$v"
  done
  # pyenv installs are not on PATH unless selected; look at them directly.
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    [ -x "$c" ] || continue
    ok "$c" && { echo "$c"; return; }
    v=$(version_of "$c") && seen="$seen $c=$v"
  done
  echo "smsgw needs Python >= $MIN_PYTHON (Django 6.1, and the ipaddress and cookie-parsing security" \
    "fixes of 3.12.4 and 3.12.6); found only:${seen:- none}. Install a newer one and set" \
    "SMSGW_PYTHON=/path/to/python3" >&2
  return 1
}

PY=$(find_python)
if [ ! -x .tools/bin/uv ]; then
  "$PY" -m venv .tools
  .tools/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
fi
# --compile-bytecode: every worker process imports the twilio SDK (hundreds of modules); where .pyc files
# cannot be written at run time (PYTHONDONTWRITEBYTECODE, a read-only image) each process would compile
# them from source again, seconds of CPU while its first messages wait.
UV_PROJECT_ENVIRONMENT=.venv .tools/bin/uv sync --frozen --quiet --compile-bytecode --python "$PY"
