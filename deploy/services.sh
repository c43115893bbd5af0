#!/usr/bin/env bash
# Make sure the local services the test suite and benchmarks use are up; start any that is down.
# Usage: deploy/services.sh postgres redis [rabbitmq]
set -uo pipefail

wait_for() { # name, check command
  local i
  for i in $(seq 1 60); do eval "$2" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "$1 did not come up" >&2; return 1
}

for svc in "$@"; do
  case "$svc" in
    postgres)
      check="pg_isready -h 127.0.0.1 -p 5432 -q"
      if ! eval "$check"; then
        echo "starting PostgreSQL" >&2
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n1)" main start
      fi
      wait_for postgres "$check" || exit 1 ;;
    redis)
      check="redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG"
      if ! eval "$check"; then
        echo "starting Redis" >&2
        mkdir -p /var/lib/redis /var/log/redis
        redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
          --dir /var/lib/redis --logfile /var/log/redis/ci.log
      fi
      wait_for redis "$check" || exit 1 ;;
    rabbitmq)
      check="rabbitmq-diagnostics -q ping"
      if ! eval "$check"; then
        echo "starting RabbitMQ" >&2
        rabbitmq-server -detached
      fi
      wait_for rabbitmq "$check" || exit 1 ;;
    *) echo "unknown service $svc" >&2; exit 2 ;;
  esac
done
