#!/usr/bin/env bash
# The fault-injection test of issue #33: two `databuild serve` "hosts" on one PostgreSQL event log
# and one shared data dir, and one build interrupted by a real fault per scenario.
#
#   scripts/faults.sh SCRATCH [SCENARIO...]   # SCENARIO: kill cut stop postgres (default: all)
#   scripts/faults.sh --check                 # exit 0 if this machine can run it, else say why
#
# Needs root, network/UTS/PID/mount namespaces, iproute2, util-linux's unshare, curl, python3 and
# PostgreSQL's binaries. SCRATCH must not exist (or be empty); everything is made under it.
#
# Each host is a network namespace with a veth on a bridge made here (a private /24 no address or
# route of this machine overlaps, 10.231.0.0/24 if free), entered with its own UTS (hostname
# `hostA`/`hostB`), PID and mount namespaces. PostgreSQL (scripts/postgres.sh) runs in the root
# namespace and listens on the bridge. The graph: FAULTS_LEAVES (40) partitions `leaf/n=N` whose
# runs each write FAULTS_TICKS (8) lines FAULTS_TICK (0.5) s apart, but for the first FAULTS_LONG
# (2), which write FAULTS_LONG_TICKS (90) lines, outlasting a takeover (hostA, asked first, starts
# them), and `fanin/all` over all of them. Every run
# appends to a ledger (outside the data dir) a `start` line, a `write` line per write and an `end`
# line: `EVENT WALL_TIME UPTIME HOST PID JOB_RUN_ID REF`. Both services get the same build request;
# then, mid-build (hostA running a job, some leaves done), one fault:
#   kill      kill -9 of hostA's service (left dead)
#   cut       hostA's veth down for FAULTS_CUT s (60), then up again
#   stop      SIGSTOP of hostA's service for FAULTS_STOP s (40), then SIGCONT
#   postgres  PostgreSQL stopped (fast shutdown), down for FAULTS_PG_DOWN s (5), started again
# and once both build requests have ended (at most FAULTS_DONE_TIMEOUT s after the fault ends, 90):
#   1. no partition was written by two runs at overlapping times (ledger intervals, wall clock:
#      the hosts share this machine's clock), and no run worked after the log had ended it (its
#      claim released: `job_runs.ended_at`);
#   2. every requested partition is `live` (`databuild status --json` on the log);
#   3. `databuild check-log` passes;
#   4. every leaf's data is whole and is the run's the log says built it (all its lines, of that
#      run alone): a run that wrote after the partition was rebuilt elsewhere shows here;
#   5. hostB's request (the survivor's) ended `completed`, and hostA's too in `postgres`;
#   6. every service still running builds a new partition after the fault.
# One PASS/FAIL line per scenario; exit 1 if any failed. The services get
# DATABUILD_LEASE_TIMEOUT (default here 10 s) so that a takeover comes quickly.
#
# A trap removes, however the script ends, every namespace, link, process and file it made
# (FAULTS_KEEP=1 keeps SCRATCH's files, for a look at the ledgers and service logs).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
DB=${DATABUILD_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/databuild}
LEASE_TAKEOVER=${DATABUILD_LEASE_TIMEOUT:-10}
LEASE=$LEASE_TAKEOVER
LEAVES=${FAULTS_LEAVES:-40}
TICKS=${FAULTS_TICKS:-8}
TICK=${FAULTS_TICK:-0.5}
LONG=${FAULTS_LONG:-2}
LONG_TICKS=${FAULTS_LONG_TICKS:-90}
PARALLEL=${FAULTS_PARALLEL:-4}
CUT=${FAULTS_CUT:-60}
STOP=${FAULTS_STOP:-40}
PG_DOWN=${FAULTS_PG_DOWN:-5}
DONE_TIMEOUT=${FAULTS_DONE_TIMEOUT:-90}
ALL_SCENARIOS=(kill cut stop postgres)

# Why this machine cannot run the test, or nothing.
cannot_run() {
  [ "$(id -u)" = 0 ] || { echo "not root"; return; }
  local b
  for b in ip unshare nsenter curl python3 psql runuser; do
    command -v "$b" >/dev/null || { echo "no \`$b\`"; return; }
  done
  for b in initdb pg_ctl; do
    command -v "$b" >/dev/null || compgen -G "/usr/lib/postgresql/*/bin/$b" >/dev/null ||
      { echo "no PostgreSQL (\`$b\`)"; return; }
  done
  local ns=dbfcheck$$
  if ! ip netns add "$ns" 2>/dev/null; then echo "cannot make a network namespace"; return; fi
  if ! ip netns exec "$ns" unshare --uts --pid --mount --fork --mount-proc true 2>/dev/null; then
    ip netns del "$ns" 2>/dev/null || true
    echo "cannot make UTS, PID and mount namespaces"
    return
  fi
  ip netns del "$ns"
}

if [ "${1:-}" = --check ]; then
  why=$(cannot_run)
  [ -z "$why" ] || { echo "$why"; exit 1; }
  exit 0
fi
[ $# -ge 1 ] || { echo "usage: $0 SCRATCH [kill|cut|stop|postgres...] | $0 --check" >&2; exit 2; }
SCRATCH=$1
shift
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=("${ALL_SCENARIOS[@]}")
for s in "${SCENARIOS[@]}"; do
  case " ${ALL_SCENARIOS[*]} " in *" $s "*) ;; *) echo "unknown scenario \`$s\`" >&2; exit 2 ;; esac
done
why=$(cannot_run)
[ -z "$why" ] || { echo "faults.sh cannot run here: $why" >&2; exit 2; }
[ -x "$DB" ] || { echo "no databuild binary at $DB (set DATABUILD_BIN)" >&2; exit 2; }
if [ -e "$SCRATCH" ] && [ -n "$(ls -A "$SCRATCH")" ]; then
  echo "$SCRATCH is not empty" >&2
  exit 2
fi

# --- What this run made, removed by `cleanup` whatever happens.
TAG=dbf$$                      # names of our namespaces and links (at most 15 chars)
BRIDGE=${TAG}br
MADE_SCRATCH=
PG_STARTED=
NETNS=()                       # namespaces made
LINKS=()                       # the hosts' links in the root namespace (the bridge aside)
LAUNCHERS=()                   # `ip netns exec unshare ...` processes (the hosts' unshare)
INITS=()                       # each host's PID 1, as seen from here
EVER=()                        # every launcher and PID 1 this run started, to check at the end

# `sleep` that a signal interrupts: bash runs its traps only once a foreground command ends.
pause() {
  sleep "$1" &
  wait $! || true
}

kill_hosts() {
  local pid
  for pid in "${INITS[@]}"; do
    # SIGKILL of a PID namespace's init kills every process in it (a stopped one too).
    kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in "${LAUNCHERS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  INITS=()
  LAUNCHERS=()
}

remove_network() {
  local l ns
  for l in "${LINKS[@]}"; do ip link del "$l" 2>/dev/null || true; done
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  LINKS=()
  NETNS=()
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  # Bash's notices of the children killed here ("Killed ...") are noise; our own go to fd 3.
  exec 3>&2 2>/dev/null
  kill_hosts
  # Any other child of this script (a sleep, a curl).
  local c
  for c in $(pgrep -P $$); do kill -KILL "$c" 2>/dev/null; done
  remove_network
  [ -n "$PG_STARTED" ] && "$repo/scripts/postgres.sh" stop "$SCRATCH/postgres"
  ip link del "$BRIDGE" 2>/dev/null
  if [ -n "$MADE_SCRATCH" ]; then
    if [ "${FAULTS_KEEP:-}" = 1 ]; then
      echo "kept $SCRATCH" >&3
    else
      rm -rf "$SCRATCH"
    fi
  fi
  local left
  left=$( (ip netns list | grep "$TAG"; ip -o link | grep "$TAG"
    for c in "${EVER[@]}"; do kill -0 "$c" && echo "process $c"; done
    pgrep -a -f "postgres -D $SCRATCH/postgres/data") 2>/dev/null)
  [ -z "$left" ] || { echo "faults.sh: left behind: $left" >&3; rc=1; }
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$SCRATCH"
MADE_SCRATCH=1
SCRATCH=$(cd "$SCRATCH" && pwd)

# --- The bridge, on a private /24 that nothing of this machine's overlaps.
NET=
for i in $(seq 231 254); do
  cand=10.$i.0
  if [ -z "$(ip -4 route show match "$cand.0/24" | grep -v '^default')" ] &&
    [ -z "$(ip -4 route show root "$cand.0/24")" ] &&
    [ -z "$(ip -4 -o addr show to "$cand.0/24")" ]; then
    NET=$cand
    break
  fi
done
[ -n "$NET" ] || { echo "no free 10.231-254.0.0/24 subnet" >&2; exit 2; }
ip link add "$BRIDGE" type bridge
ip addr add "$NET.1/24" dev "$BRIDGE"
ip link set "$BRIDGE" up

# --- PostgreSQL, on the bridge (and 127.0.0.1, for this script's own commands).
mkdir -p "$SCRATCH/postgres"
PG_STARTED=1
pg_url=$(POSTGRES_LISTEN=$NET.1 POSTGRES_TRUST=$NET.0/24 "$repo/scripts/postgres.sh" start "$SCRATCH/postgres")
pg_port=${pg_url##*:}
pg_port=${pg_port%%/*}
PG_LOCAL=postgres://postgres@127.0.0.1:$pg_port
PG_BRIDGE=postgres://postgres@$NET.1:$pg_port

# --- One scenario's project: graph, job, ledger.
make_project() { # DIR
  local dir=$1 n inputs=""
  mkdir -p "$dir"
  for n in $(seq "$LEAVES"); do inputs+="\"leaf/n=$n\", "; done
  cat >"$dir/databuild.toml" <<EOF
[graph]
name = "faults"
data_dir = "data"

[[job]]
name = "leaf"
outputs = ["leaf/n={n:int}"]
command = ["sh", "job.sh", "leaf"]
env = { LEDGER = "$dir/ledger", TICKS = "$TICKS", TICK = "$TICK", LONG = "$LONG", LONG_TICKS = "$LONG_TICKS" }

[[job]]
name = "fanin"
outputs = ["fanin/all"]
inputs = [${inputs%, }]
command = ["sh", "job.sh", "fanin"]
env = { LEDGER = "$dir/ledger", TICKS = "$TICKS", TICK = "$TICK", LONG = "$LONG", LONG_TICKS = "$LONG_TICKS" }
EOF
  cat >"$dir/job.sh" <<'EOF'
# One run of a fault-test job. Its start, each write of its output and its end go to $LEDGER:
# EVENT WALL_TIME UPTIME HOST PID JOB_RUN_ID REF
set -eu
host=$(hostname)
ref=${DATABUILD_OUTPUTS#'["'}
ref=${ref%'"]'}
# Staged (contract section 3): moved into place only once the log has recorded the run.
out="${DATABUILD_OUTPUT_DIR:-$DATABUILD_DATA_DIR}/$ref"
mark() {
  read -r up _ </proc/uptime
  echo "$1 $(date +%s.%N) $up $host $$ $DATABUILD_JOB_RUN_ID $ref" >>"$LEDGER"
}
mark start
mkdir -p "$(dirname "$out")"
if [ "$1" = leaf ]; then
  # The first $LONG leaves outlast a takeover; the others take a few seconds.
  ticks=$TICKS
  [ "$DATABUILD_FIELD_N" -gt "$LONG" ] || ticks=$LONG_TICKS
  : >"$out"
  i=1
  while :; do
    echo "$host $DATABUILD_JOB_RUN_ID $i $ticks" >>"$out"
    mark write
    [ "$i" -ge "$ticks" ] && break
    i=$((i + 1))
    sleep "$TICK"
  done
else
  for r in $(printf '%s' "$DATABUILD_INPUTS" | tr -d '[]"' | tr , ' '); do
    cat "$DATABUILD_DATA_DIR/$r"
  done >"$out"
  mark write
fi
mark end
EOF
  : >"$dir/ledger"
}

# --- A host: netns + veth on the bridge, then UTS/PID/mount namespaces running `databuild serve`.
HOST_NS=()
HOST_IP=()
HOST_SVC=()
HOST_VETH=()
start_host() { # INDEX NAME DIR DATABASE
  local i=$1 name=$2 dir=$3 db=$4
  local ns=$TAG-$name veth=$TAG${name: -1} ip=$NET.$((i + 2))
  veth=${veth,,}
  ip netns add "$ns"
  NETNS+=("$ns")
  ip link add "$veth" type veth peer name "${veth}p"
  LINKS+=("$veth")
  ip link set "${veth}p" netns "$ns"
  ip -n "$ns" link set "${veth}p" name eth0
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip link set "$veth" master "$BRIDGE" up
  # PID 1 of the host: sets the hostname, starts the service, then reaps until killed.
  ip netns exec "$ns" unshare --uts --pid --mount --fork --mount-proc \
    env DATABUILD_LEASE_TIMEOUT="$LEASE" DATABUILD_EVENT_LOG="$PG_BRIDGE/$db" \
    bash -c 'hostname "$1"; cd "$3"
      "$2" --graph "$3/databuild.toml" serve --bind "$4:8080" --allow-open >>"$5" 2>&1 &
      while :; do wait; sleep 1; done' host-init "$name" "$DB" "$dir" "$ip" "$dir/$name.log" \
    </dev/null >/dev/null 2>&1 &
  local launcher=$!
  LAUNCHERS+=("$launcher")
  local init="" svc="" _
  for _ in $(seq 100); do
    [ -n "$init" ] || init=$(pgrep -P "$launcher" || true)
    [ -z "$init" ] || svc=$(pgrep -P "$init" -x databuild || true)
    [ -n "$svc" ] && break
    pause 0.1
  done
  [ -n "$init" ] && INITS+=("$init") && EVER+=("$init" "$launcher")
  [ -n "$svc" ] || { echo "$name: its service did not start" >&2; return 1; }
  for _ in $(seq 300); do
    curl -sf -o /dev/null "http://$ip:8080/healthz" && break
    kill -0 "$svc" 2>/dev/null || { echo "$name: its service exited:" >&2; tail -5 "$dir/$name.log" >&2; return 1; }
    pause 0.1
  done
  curl -sf -o /dev/null "http://$ip:8080/healthz" || { echo "$name: its service never answered" >&2; return 1; }
  HOST_NS[$i]=$ns
  HOST_IP[$i]=$ip
  HOST_SVC[$i]=$svc
  HOST_VETH[$i]=$veth
}

T0=0
since() { awk -v now="$(date +%s.%N)" -v t0="$T0" 'BEGIN { printf "%.1f", now - t0 }'; }
say() { printf '[%6ss] %s\n' "$(since)" "$*"; }

HOST_NAMES=(hostA hostB)

# POST /api/v1/builds to the service at IP; prints the build request's id.
request_build() { # IP BODY
  local answer
  answer=$(curl -sf --max-time 20 -X POST -H 'Content-Type: application/json' --data "$2" \
    "http://$1:8080/api/v1/builds") || return 1
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])["build_request_id"])' "$answer" 2>/dev/null
}

# Terminal status of a build request, or nothing while it runs (or the log cannot be read).
build_status() { # DIR DATABASE ID
  "$DB" --graph "$1/databuild.toml" --event-log "$PG_LOCAL/$2" --json builds "$3" 2>/dev/null |
    python3 -c 'import json, sys
b = json.load(sys.stdin)
if b["status"] in ("completed", "failed", "cancelled"):
    print(b["status"] + ((": " + b["message"]) if b.get("message") else ""))' 2>/dev/null || true
}

# Is hostA running a leaf job while at least two leaves are done?
mid_build() { # LEDGER
  awk '$7 ~ /^leaf\// {
         k = $4 " " $5 " " $6
         if ($1 == "start") open[k] = 1
         if ($1 == "end") { delete open[k]; ends++ }
       }
       END { a = 0; for (k in open) if (k ~ /^hostA /) a++; exit !(ends >= 2 && a >= 1) }' "$1"
}

# Checks 1 and 4: the ledger's intervals, and the leaves' data against the log's status.
check_ledger() { # LEDGER T0 STATUS_JSON DATA_DIR RUNS_JSON
  python3 - "$@" <<'PY'
import collections, json, os, sys
ledger, t0, status_file, data_dir, runs_file = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
writers = collections.OrderedDict()
for line in open(ledger):
    f = line.split()
    if len(f) != 7:
        continue
    event, wall, _up, host, pid, run, ref = f
    t = float(wall)
    w = writers.setdefault((ref, host, pid, run), {"first": line.rstrip(), "last": line.rstrip(), "t0": t, "t1": t, "ended": False})
    if t >= w["t1"]:
        w["t1"], w["last"] = t, line.rstrip()
    w["ended"] |= event == "end"
by_ref = collections.defaultdict(list)
for (ref, host, pid, run), w in writers.items():
    by_ref[ref].append(((host, pid, run), w))
bad = 0
overlapped = set()
for ref, ws in by_ref.items():
    for i in range(len(ws)):
        for j in range(i + 1, len(ws)):
            (ka, a), (kb, b) = ws[i], ws[j]
            if a["t0"] < b["t1"] and b["t0"] < a["t1"]:
                bad += 1
                overlapped.add(ref)
                both = min(a["t1"], b["t1"]) - max(a["t0"], b["t0"])
                print(f"  OVERLAP {ref}: written by two runs at once for {both:.1f} s")
                for k, w in ((ka, a), (kb, b)):
                    print(f"    {k[0]} pid {k[1]} run {k[2]}: {w['t0'] - t0:.1f}s .. {w['t1'] - t0:.1f}s{'' if w['ended'] else ' (no end line)'}")
                    print(f"      {w['first']}")
                    print(f"      {w['last']}")
# 4: the live leaves' data is whole, and written by the run the log says built it.
torn = 0
try:
    status = json.load(open(status_file))
except Exception:
    status = []
hosts = {k[2]: k[0] for (ref, *k) in writers}
for p in status:
    ref = p["ref"]
    if not ref.startswith("leaf/") or p.get("status") != "live":
        continue
    try:
        lines = open(os.path.join(data_dir, ref)).read().split("\n")[:-1]
    except OSError as e:
        torn += 1
        print(f"  DATA {ref}: live, but its data cannot be read ({e})")
        continue
    # Each line is `HOST RUN I TICKS`: whole means lines 1..TICKS of one run, in order.
    rows = [l.split() for l in lines]
    runs = collections.Counter(r[1] for r in rows if len(r) == 4)
    ticks = int(rows[-1][3]) if rows and len(rows[-1]) == 4 else 0
    whole = [r[2] for r in rows] == [str(i) for i in range(1, ticks + 1)] and all(len(r) == 4 for r in rows)
    built = p.get("built_by")
    if not whole or set(runs) != {built}:
        torn += 1
        held = ", ".join(f"{n} of run {r} ({hosts.get(r, '?')})" for r, n in runs.items()) or "nothing"
        print(f"  DATA {ref}: the log says run {built} ({hosts.get(built, '?')}) built it; its data holds {held} ({len(lines)} lines{'' if whole else ', not whole'}); its writers{': see OVERLAP above' if ref in overlapped else ':'}")
        for (host, pid, run), w in ([] if ref in overlapped else by_ref[ref]):
            print(f"    {host} pid {pid} run {run}: {w['t0'] - t0:.1f}s .. {w['t1'] - t0:.1f}s{'' if w['ended'] else ' (no end line)'}")
            print(f"      {w['first']}")
            print(f"      {w['last']}")
# 1b: no run went on after the log had ended it (its claim released, maybe rebuilt elsewhere).
late = 0
try:
    ended = {r[0]: r[1:] for r in json.load(open(runs_file))["rows"]}
except Exception:
    ended = {}
for (ref, host, pid, run), w in writers.items():
    if run in ended and ended[run][1] is not None and w["t1"] > ended[run][1] / 1e9:
        late += 1
        status, at, message = ended[run]
        print(f"  LATE {ref}: {host} pid {pid} run {run} worked from {w['t0'] - t0:.1f}s to {w['t1'] - t0:.1f}s, but the log ended it at {at / 1e9 - t0:.1f}s (`{status}`{': ' + message if message else ''})")
        print(f"      {w['first']}")
        print(f"      {w['last']}")
runs = collections.Counter(host for (ref, host, pid, run) in writers)
print("  ledger: " + ", ".join(f"{h} ran {n} runs" for h, n in sorted(runs.items())))
print(f"{bad} {torn} {late}", file=sys.stderr)
PY
}

RESULTS=()
run_scenario() { # NAME
  local name=$1 dir=$SCRATCH/$1 db=f_$1 fail=()
  echo "== scenario $name"
  T0=$(date +%s.%N)
  make_project "$dir"
  psql "$PG_LOCAL/postgres" -qc "CREATE DATABASE $db" >/dev/null
  # A restart of the log must cost nobody their lease: the default 30 s keeps jobs running for
  # 15 s without a renewal. The other scenarios take work over, so a short lease keeps them quick.
  LEASE=$LEASE_TAKEOVER
  [ "$name" != postgres ] || LEASE=${DATABUILD_LEASE_TIMEOUT:-30}
  start_host 0 hostA "$dir" "$db"
  start_host 1 hostB "$dir" "$db"
  say "hostA ${HOST_IP[0]} (service pid ${HOST_SVC[0]}), hostB ${HOST_IP[1]} (pid ${HOST_SVC[1]}); log $PG_BRIDGE/$db; lease ${LEASE}s"
  local refs=(fanin/all) n
  for n in $(seq "$LEAVES"); do refs+=("leaf/n=$n"); done
  local body
  body=$(python3 -c 'import json, sys; print(json.dumps({"partitions": sys.argv[2:], "parallel": int(sys.argv[1])}))' "$PARALLEL" "${refs[@]}")
  local ids=() i
  for i in 0 1; do
    ids[$i]=$(request_build "${HOST_IP[$i]}" "$body") ||
      { echo "${HOST_NAMES[$i]} refused the build request" >&2; return 1; }
  done
  say "build requested: hostA ${ids[0]}, hostB ${ids[1]}"

  local deadline=$((SECONDS + 60))
  until mid_build "$dir/ledger"; do
    if [ $SECONDS -ge $deadline ]; then
      fail+=("hostA never ran a job while leaves were done (60 s)")
      break
    fi
    pause 0.2
  done
  say "hostA is running: $(awk '$7 ~ /^leaf\// && $4 == "hostA" {
      if ($1 == "start") open[$6] = $7
      if ($1 == "end") delete open[$6]
    } END { for (r in open) printf "%s ", open[r] }' "$dir/ledger")"
  local svc=${HOST_SVC[0]}
  case $name in
    kill)
      say "fault: kill -9 of hostA's service (pid $svc)"
      kill -KILL "$svc"
      ;;
    cut)
      say "fault: hostA's network cut (${HOST_VETH[0]} down) for ${CUT}s"
      ip link set "${HOST_VETH[0]}" down
      pause "$CUT"
      ip link set "${HOST_VETH[0]}" up
      say "hostA's network restored"
      ;;
    stop)
      say "fault: SIGSTOP of hostA's service (pid $svc) for ${STOP}s"
      kill -STOP "$svc"
      pause "$STOP"
      kill -CONT "$svc"
      say "SIGCONT to hostA's service"
      ;;
    postgres)
      say "fault: PostgreSQL stopped for ${PG_DOWN}s, then started again"
      "$repo/scripts/postgres.sh" restart "$SCRATCH/postgres" "$PG_DOWN"
      say "PostgreSQL is back"
      ;;
  esac

  deadline=$((SECONDS + DONE_TIMEOUT))
  local ended=("" "")
  while :; do
    for i in 0 1; do
      [ -n "${ended[$i]}" ] || ended[$i]=$(build_status "$dir" "$db" "${ids[$i]}")
    done
    [ -n "${ended[0]}" ] && [ -n "${ended[1]}" ] && break
    if [ $SECONDS -ge $deadline ]; then
      for i in 0 1; do
        [ -n "${ended[$i]}" ] ||
          fail+=("${HOST_NAMES[$i]}'s build request ${ids[$i]} had not ended ${DONE_TIMEOUT} s after the fault")
      done
      break
    fi
    pause 1
  done
  say "hostA's request: ${ended[0]:-not ended}"
  say "hostB's request: ${ended[1]:-not ended}"
  # Let stray writers show up in the ledger: wait until it has been quiet for a while.
  local quiet=0 size last=-1 _
  for _ in $(seq "$(awk -v n="$LONG_TICKS" -v t="$TICK" 'BEGIN { printf "%d", n * t + 10 }')"); do
    size=$(stat -c %s "$dir/ledger")
    if [ "$size" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0; fi
    last=$size
    [ $quiet -ge 3 ] && break
    pause 1
  done

  # 2. every requested partition is live.
  local status_json=$dir/status.json
  if ! "$DB" --graph "$dir/databuild.toml" --event-log "$PG_LOCAL/$db" --json status "${refs[@]}" \
    >"$status_json" 2>"$dir/status.err"; then
    fail+=("status failed: $(head -c 300 "$dir/status.err")")
  fi
  local not_live
  not_live=$(python3 -c 'import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception:
    rows = []
for p in rows:
    if p["status"] != "live":
        print("  NOT LIVE %s: %s (%s)" % (p["ref"], p["status"], "; ".join(p.get("reasons") or [])))' "$status_json")
  if [ -n "$not_live" ]; then
    echo "$not_live" | head -12
    [ "$(echo "$not_live" | wc -l)" -le 12 ] || echo "  ..."
    fail+=("$(echo "$not_live" | wc -l) requested partitions not live")
  fi
  # 1 and 4: the ledger and the data, against the log's status and runs.
  "$DB" --graph "$dir/databuild.toml" --event-log "$PG_LOCAL/$db" --json sql \
    "SELECT job_run_id, status, ended_at, message FROM job_runs WHERE ended_at IS NOT NULL" \
    >"$dir/runs.json" 2>"$dir/runs.err" || fail+=("sql failed: $(head -c 300 "$dir/runs.err")")
  local counts
  counts=$(check_ledger "$dir/ledger" "$T0" "$status_json" "$dir/data" "$dir/runs.json" 2>&1 >"$dir/ledger.report")
  cat "$dir/ledger.report"
  local overlaps torn late
  read -r overlaps torn late <<<"$counts"
  if ! [[ $counts =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]; then
    echo "$counts" | sed 's/^/  /'
    fail+=("the ledger check failed")
    overlaps=0 torn=0 late=0
  fi
  [ "$overlaps" = 0 ] || fail+=("$overlaps partitions written by two runs at overlapping times")
  [ "$late" = 0 ] || fail+=("$late runs worked after the log had ended them")
  [ "$torn" = 0 ] || fail+=("$torn live leaves whose data is not their run's")
  # 3. the log checks.
  if ! "$DB" --graph "$dir/databuild.toml" --event-log "$PG_LOCAL/$db" check-log >"$dir/check.out" 2>&1; then
    sed 's/^/  CHECK-LOG /' "$dir/check.out" | head -10
    fail+=("check-log failed")
  fi
  # 5. the survivor's request completed (hostB's; hostA's too when only PostgreSQL was at fault).
  if [ -n "${ended[1]}" ] && [[ ${ended[1]} != completed* ]]; then
    fail+=("hostB's request ended ${ended[1]%%:*}, not completed")
  fi
  if [ "$name" = postgres ] && [ -n "${ended[0]}" ] && [[ ${ended[0]} != completed* ]]; then
    fail+=("hostA's request ended ${ended[0]%%:*}, not completed")
  fi
  # 6. every service still running builds again: one new partition each, after the fault.
  local again=(1)
  [ "$name" = kill ] || again=(0 1)
  for i in "${again[@]}"; do
    local h=${HOST_NAMES[$i]} id got=""
    id=$(request_build "${HOST_IP[$i]}" "{\"partitions\": [\"leaf/n=$((1000 + i))\"]}" || true)
    if [ -z "$id" ]; then
      fail+=("$h's service no longer accepts builds")
      continue
    fi
    for _ in $(seq 60); do
      got=$(build_status "$dir" "$db" "$id")
      [ -n "$got" ] && break
      pause 0.5
    done
    say "$h's build of leaf/n=$((1000 + i)) after the fault: ${got:-not ended after 30 s}"
    [[ $got == completed* ]] || fail+=("$h's service could not build a new partition after the fault")
  done

  if [ ${#fail[@]} -gt 0 ]; then
    for i in 0 1; do
      local h=${HOST_NAMES[$i]}
      echo "  $h's service log, last lines:"
      tail -5 "$dir/$h.log" | sed 's/^/    /'
    done
  fi
  kill_hosts
  remove_network
  psql "$PG_LOCAL/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  local took
  took=$(since)
  if [ ${#fail[@]} -eq 0 ]; then
    RESULTS+=("PASS $name (${took}s)")
  else
    local joined
    joined=$(printf '%s; ' "${fail[@]}")
    RESULTS+=("FAIL $name (${took}s): ${joined%; }")
  fi
  echo "${RESULTS[-1]}"
}

for s in "${SCENARIOS[@]}"; do
  run_scenario "$s"
done
echo "== faults.sh summary"
printf '%s\n' "${RESULTS[@]}"
for r in "${RESULTS[@]}"; do
  [[ $r == PASS* ]] || exit 1
done
