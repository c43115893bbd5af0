#!/usr/bin/env bash
# What the benchmarks use besides the project's dependencies:
# - wrk (bench ingest, bench facade), a C client that leaves the cores to the server, from Debian's
#   packages. Without it those benchmarks fall back to a Python client in their own process, which shares
#   the cores with the server and understates it.
# - py-spy (the profiles in docs/benchmarks.md: `py-spy record --gil -p PID`), pinned, into .venv. A later
#   ./deploy/bootstrap.sh (uv sync --frozen) removes it again; run this again after one.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk
  else
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk
  fi
fi
if [ ! -x .venv/bin/py-spy ]; then
  [ -x .tools/bin/uv ] || ./deploy/bootstrap.sh
  .tools/bin/uv pip install --quiet --python .venv/bin/python "py-spy==0.4.1"
fi
