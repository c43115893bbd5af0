#!/usr/bin/env bash
# What the HTTP benchmarks load the server with (bench ingest, bench facade): wrk, a C client that leaves
# the cores to the server, from Debian's packages. Without it those benchmarks fall back to a Python
# client in their own process, which shares the cores with the server and understates it.
set -euo pipefail
if command -v wrk >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk
else
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk
fi
