#!/usr/bin/env bash
# Install everything and run the whole suite: the static checks, then the tests in two halves, each in
# parallel (pytest-xdist) with a serial group after it:
#   1. SQLite + the embedded broker: every test that touches no database (they run once, here), the tests
#      about SQLite and the embedded mode, and the embedded run itself;
#   2. PostgreSQL + Redis: every test that uses the database, and the integration tests with real
#      `celery worker` / `celery beat` processes and the sandboxes.
# tests/isolation.py says how the tests are split and isolated. Options (the rest go to pytest):
#   --long          also run the long tier (production-scale variants, tests marked `long`)
#   --workers N     parallel workers of the PostgreSQL half (default: SMSGW_TEST_WORKERS, else 4; the SQLite
#                   half, which runs beside it, takes SMSGW_TEST_SQLITE_WORKERS, else 3). Their tests mostly
#                   wait on processes and windows: with 3 and 2 the parallel phases used under 1 of the 2 cores.
# Every phase's wall-clock and CPU time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

LONG=() WORKERS="${SMSGW_TEST_WORKERS:-4}" SQLITE_WORKERS="${SMSGW_TEST_SQLITE_WORKERS:-3}" PYTEST_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --long) LONG=(--long); shift ;;
    --workers) WORKERS="$2"; shift 2 ;;
    *) PYTEST_ARGS+=("$1"); shift ;;
  esac
done

# One line per phase at the end: wall-clock seconds, and the CPU seconds (user + system) of the phase's
# processes and their children, as bash's `times` reports them when the phase's subshell ends.
TIMINGS=() FAILED=() STARTED=$(date +%s.%N)
phase() {
  local name="$1" status t0 cpu
  shift
  t0=$(date +%s.%N) cpu=$(mktemp)
  # In a subshell of its own with -e on (a function called from an `||` list would run with -e off); the
  # subshell writes the CPU time of its processes as it exits (only its own: the static checks run beside).
  set +e
  (trap 'times >"$cpu"' EXIT; set -e; "$@")
  status=$?
  set -e
  record "$name" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$(children_cpu "$cpu")" "$status"
  rm -f "$cpu"
}
record() { # name, wall seconds, CPU seconds, exit status
  TIMINGS+=("$(awk -v n="$1" -v w="$2" -v c="$3" -v s="$4" \
    'BEGIN { printf "timing: %-16s %7.1f s wall %8.1f s CPU%s", n, w, c, (s ? "  FAILED" : "") }')")
  [ "$4" = 0 ] || FAILED+=("$1")
}
children_cpu() {
  # The file holds what `times` printed (run in the shell itself: in a pipe or $(...) it would report a
  # subshell's); its second line is the children's user and system time, as "XmY.YYYs XmY.YYYs".
  sed -n 2p "$1" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); n += p[1] * 60 + p[2] } print n }'
}
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

# Bytecode, compiled once. The suite starts some thousand Python processes (celery workers and beats,
# gunicorn, the sandboxes, manage.py), and each pytest run imports every test module. Where
# PYTHONDONTWRITEBYTECODE is set (CI's image sets it) no .pyc of the checkout was ever written: every process
# compiled the modules it imports from source again (about 0.25 s of CPU for a worker or a beat), and
# every pytest process rewrote the asserts of every test module again (about 6 s of CPU each; pytest keeps
# its rewritten modules only where bytecode may be written). The checkout's modules are compiled here, and
# the test processes may write bytecode (__pycache__, ignored by git; nothing is written where it cannot be).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q -j 0 -x '/(\.venv|\.tools|\.git|node_modules)/' . >/dev/null

static_checks() {
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
}
# A phase in the background: its output goes to a file, shown (and its timing recorded) by `collect`.
declare -A BACKGROUND=()
background() {
  local name="$1" dir
  shift
  dir="$(mktemp -d)"
  BACKGROUND[$name]="$dir"
  (
    t0=$(date +%s.%N)
    set +e
    (set -e; "$@") >"$dir/log" 2>&1
    status=$?
    times >"$dir/times"
    echo "$status $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }') $(children_cpu "$dir/times")" \
      >"$dir/result"
  ) &
  echo $! >"$dir/pid"
}
collect() {
  local name="$1" dir="${BACKGROUND[$1]}" status wall cpu
  wait "$(cat "$dir/pid")" || true
  read -r status wall cpu <"$dir/result"
  cat "$dir/log"
  record "$name" "$wall" "$cpu" "$status"
  rm -rf "$dir"
}

# The tests. --dist load with --maxschedchunk 1 keeps two tests queued per worker and hands each worker the
# next one as it finishes one, in the order of tests/durations.json (longest first): the long tests spread
# over every worker, and the run ends on short ones. (Without it, xdist's first hand-out gives each worker a
# quarter of its share as one consecutive block: the first worker would get all the longest tests.) A hang
# fails its test at the timeout (pyproject.toml).
run_tests() { .venv/bin/python -m pytest -p no:cacheprovider "${LONG[@]}" "$@" "${PYTEST_ARGS[@]}"; }
# pytest's exit status 5 is "no test selected": a half's serial group may be empty, and so may a phase
# that extra arguments (-k, a path) narrow to nothing.
selected_or_none() {
  local status=0
  "$@" || status=$?
  [ "$status" = 0 ] || { [ "$status" = 5 ] && [ "$ALLOW_NONE" = 1 ]; }
}
parallel() {
  ALLOW_NONE=$((${#PYTEST_ARGS[@]} > 0)) selected_or_none run_tests -n "$WORKERS" --dist load --maxschedchunk 1 \
    --group parallel "$@"
}
serial() { ALLOW_NONE=1 selected_or_none run_tests --group serial "$@"; }

# The halves' parallel runs go at once: the PostgreSQL half's integration tests spend much of their time
# waiting on their processes, and the SQLite half's tests and the static checks take that CPU. Each half
# has its own var folder and its own range of ports (tests/isolation.py); only the PostgreSQL half uses the
# database server and Redis. The serial groups run after, alone.
#
# 1. Embedded mode's database and broker: SQLite (WAL) and the filesystem transport.
on_sqlite() {
  unset DATABASE_URL CELERY_BROKER_URL DJANGO_SECRET_KEY SMSGW_ENV
  export SMSGW_VAR_DIR="$SQLITE_VAR" SMSGW_TEST_PORT_BASE=26000
  "$@"
}
SQLITE_VAR="${SMSGW_TEST_VAR_DIR:-$(mktemp -d)}/sqlite"
mkdir -p "$SQLITE_VAR"
background static static_checks
WORKERS="$SQLITE_WORKERS" background sqlite on_sqlite parallel --half sqlite

# 2. PostgreSQL + Redis, real worker/beat/sandbox processes included.
export SMSGW_VAR_DIR="${SMSGW_TEST_VAR_DIR:-$(mktemp -d)}/postgres" SMSGW_TEST_PORT_BASE=20000
mkdir -p "$SMSGW_VAR_DIR"
export DATABASE_URL="${SMSGW_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/smsgw}"
export CELERY_BROKER_URL="${SMSGW_TEST_BROKER_URL:-redis://127.0.0.1:6379/9}"
export DJANGO_SECRET_KEY="test-only-secret" SMSGW_ENV=test
phase postgres parallel --half postgres
collect sqlite
collect static

# The serial groups, one test at a time with nothing else running.
phase sqlite-serial on_sqlite serial --half sqlite
phase postgres-serial serial --half postgres

TOTAL_TIMES="$(mktemp)"
times >"$TOTAL_TIMES"
record total "$(awk -v a="$STARTED" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$(children_cpu "$TOTAL_TIMES")" 0
rm -f "$TOTAL_TIMES"
printf '%s\n' "${TIMINGS[@]}"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "failed: ${FAILED[*]}" >&2
  exit 1
fi
