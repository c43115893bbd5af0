#!/usr/bin/env bash
# Install the pinned dependencies (uv.lock) into .venv. Idempotent; needs only Python >= 3.12 and
# access to PyPI. Set SMSGW_PYTHON to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."

ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
  local c
  for c in "${SMSGW_PYTHON:-}" python3.13 python3.12 python3 python; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && ok "$c" && { command -v "$c"; return; }
  done
  # pyenv installs are not on PATH unless selected; look at them directly.
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    [ -x "$c" ] && ok "$c" && { echo "$c"; return; }
  done
  echo "smsgw needs Python >= 3.12 (Django 6.1); set SMSGW_PYTHON=/path/to/python3.12" >&2
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
