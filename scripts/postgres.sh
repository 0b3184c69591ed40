#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests: `scripts/postgres.sh start DIR` prints its URL;
# `scripts/postgres.sh stop DIR` stops it; `scripts/postgres.sh restart DIR [SECONDS] [MODE]`
# stops it (pg_ctl's MODE: `fast`, the default, disconnects clients; `immediate`, as a crash), waits
# SECONDS (default 0) and starts it again with the
# same options. Uses the machine's initdb and pg_ctl (Debian's postgresql package, installed if
# missing), runs as the `postgres` user when started as root, listens on 127.0.0.1 on a free port,
# and keeps everything under DIR.
#
# Options for `start`, from the environment (unset: as above):
#   POSTGRES_LISTEN=ADDR   also listen on ADDR (an address of this machine, e.g. a bridge's);
#                          the printed URL then names ADDR instead of 127.0.0.1
#   POSTGRES_TRUST=CIDR    also accept (trust) connections from CIDR, e.g. 10.231.0.0/24
set -euo pipefail
cmd=$1
dir=$2
find_bin() {
  for b in "$(command -v "$1" 2>/dev/null)" /usr/lib/postgresql/*/bin/"$1"; do
    [ -x "$b" ] && { echo "$b"; return; }
  done
}
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "$cmd" in
  start)
    if [ -z "$(find_bin initdb)" ]; then
      echo "installing PostgreSQL (Debian's postgresql package)..." >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
    fi
    initdb=$(find_bin initdb); pg_ctl=$(find_bin pg_ctl)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown postgres "$dir"
      # The server runs as `postgres`: it must be able to reach DIR through its parents.
      p=$(dirname "$dir"); while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
    fi
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1
    listen=127.0.0.1
    host=127.0.0.1
    if [ -n "${POSTGRES_LISTEN:-}" ]; then
      listen="127.0.0.1,$POSTGRES_LISTEN"
      host=$POSTGRES_LISTEN
    fi
    if [ -n "${POSTGRES_TRUST:-}" ]; then
      echo "host all all $POSTGRES_TRUST trust" | as_owner tee -a "$dir/data/pg_hba.conf" >/dev/null
    fi
    opts="-p $port -k $dir -c listen_addresses=$listen -c fsync=off -c max_connections=300"
    echo "$opts" >"$dir/options"
    as_owner "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o "$opts" start >/dev/null
    echo "postgres://postgres@$host:$port/postgres"
    ;;
  restart)
    pg_ctl=$(find_bin pg_ctl)
    as_owner "$pg_ctl" -D "$dir/data" -m "${4:-fast}" -w stop >/dev/null
    sleep "${3:-0}"
    as_owner "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o "$(cat "$dir/options")" start >/dev/null
    ;;
  stop)
    pg_ctl=$(find_bin pg_ctl)
    [ -d "$dir/data" ] && as_owner "$pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    ;;
esac
