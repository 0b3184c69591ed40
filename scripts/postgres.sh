#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests: `scripts/postgres.sh start DIR` prints its URL;
# `scripts/postgres.sh stop DIR` stops it; `scripts/postgres.sh restart DIR [PAUSE] [MODE]` stops
# it (pg_ctl's MODE: `fast`, the default, or `immediate`, as a crash), waits PAUSE seconds
# (default 0) and starts it again on the same port, for the tests of lost connections. Uses the machine's initdb and pg_ctl (Debian's
# postgresql package, installed if missing), runs as the `postgres` user when started as root,
# listens on 127.0.0.1 on a free port, and keeps everything under DIR.
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
    options="-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
    echo "$options" > "$dir/options"
    as_owner "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o "$options" start >/dev/null
    echo "postgres://postgres@127.0.0.1:$port/postgres"
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
