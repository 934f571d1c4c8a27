#!/usr/bin/env bash
# Throughput and cap-accuracy bench of fwc's userspace forwarder, over loopback inside a
# throwaway network namespace (deleted on exit). Needs root, iperf3, nft, ip, python3.
#
#   bench/forward/run.sh [--repeats 5] [--time 5] [--out DIR] [--fwc PATH] [--no-caps]
#                        [--peer NAME='CMD'] ...
#
# Variants, run alternately (A B C D A B C D …), REPEATS times each, medians reported:
#   direct        iperf3 client -> iperf3 server
#   nft-redirect  nftables `redirect` (nat output hook) to the server port
#   fwc-splice    `fwc forward --config` (splice(2))
#   fwc-copy      the same with FWC_FORWARD_SPLICE=0 (buffered copy)
#   peers         --peer NAME='CMD', CMD with {listen} (port to listen on) and {target}
#                 (server port), e.g.  --peer socat='socat TCP-LISTEN:{listen},fork,reuseaddr TCP:127.0.0.1:{target}'
#                 Built in: --peer socat, --peer haproxy (if installed).
# CPU seconds of the forwarding process (utime+stime, children included) per run, and of the
# whole machine (/proc/stat busy time), are recorded.
# Cap accuracy: fwc-splice with a cap of 1 MB/s, 10 Mbit/s and 100 Mbit/s, iperf3 -R (the
# client measures what it receives), first 3 s (the burst) and the last interval (iperf3's
# end-of-test drain) left out: measured/target.
# Output: DIR/results.json and DIR/results.md (default bench/forward/out/).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REPEATS=5
TIME=5
OUT="$HERE/out"
FWC=""
CAPS=1
PEERS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2;;
    --time) TIME=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --fwc) FWC=$2; shift 2;;
    --no-caps) CAPS=0; shift;;
    --peer) PEERS+=("$2"); shift 2;;
    -h|--help) sed -n '2,22p' "$0"; exit 0;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "needs root (network namespace, nft)" >&2; exit 1; }
for t in iperf3 nft ip python3; do command -v $t >/dev/null || { echo "missing $t" >&2; exit 1; }; done
if [[ -z "$FWC" ]]; then
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
  (cd "$ROOT" && cargo build -q --release -p fwc-runtime --bin fwc)
  FWC="$CARGO_TARGET_DIR/release/fwc"
fi
mkdir -p "$OUT"
RAW="$OUT/raw"; rm -rf "$RAW"; mkdir -p "$RAW"

NS="fwc-bench-$$"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  # Anything else still inside the namespace (forked children of a peer) goes too.
  for p in $(ip netns pids "$NS" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
nsx() { ip netns exec "$NS" "$@"; }

SERVER=5201
ip netns exec "$NS" iperf3 -s -p $SERVER >/dev/null 2>&1 & PIDS+=($!)

# nft REDIRECT: port 6000 -> SERVER, for locally generated traffic (nat output hook).
nsx nft -f - <<NFT
table ip fwcbench {
  chain out { type nat hook output priority -100; tcp dport 6000 redirect to :$SERVER; }
}
NFT

fwc_config() { # port up_bytes_per_sec|null
  python3 - "$1" "$2" "$SERVER" <<'PY'
import json, sys
port, cap, server = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
cap = None if cap == "null" else int(cap)
print(json.dumps({"version": 1, "listeners": [{
  "rule": f"bench-{port}", "proto": "tcp", "listen_addr": "127.0.0.1", "listen_port": port,
  "targets": [{"host": "127.0.0.1", "port": server}], "allow_from": [],
  "up_bytes_per_sec": cap, "down_bytes_per_sec": cap, "burst_bytes": None if cap is None else max(cap // 2, 65536),
  "max_conns": None, "conn_rate": None, "proxy_protocol": None,
  "idle_timeout_ms": 3600000, "connect_timeout_ms": 5000}]}))
PY
}

start_bg() { # VAR=value... cmd...   (prints the pid of cmd itself: ip netns exec and env exec)
  ip netns exec "$NS" env "$@" >"$RAW/$NAME.log" 2>&1 &
  echo $!
}

declare -A PORT PID
VARIANTS=(direct nft-redirect fwc-splice fwc-copy)
PORT[direct]=$SERVER; PID[direct]=""
PORT[nft-redirect]=6000; PID[nft-redirect]=""

fwc_config 6001 null >"$RAW/fwc-splice.json"
NAME=fwc-splice; PID[fwc-splice]=$(start_bg FWC_FORWARD_SPLICE=1 "$FWC" forward --config "$RAW/fwc-splice.json"); PIDS+=(${PID[fwc-splice]}); PORT[fwc-splice]=6001
fwc_config 6002 null >"$RAW/fwc-copy.json"
NAME=fwc-copy; PID[fwc-copy]=$(start_bg FWC_FORWARD_SPLICE=0 "$FWC" forward --config "$RAW/fwc-copy.json"); PIDS+=(${PID[fwc-copy]}); PORT[fwc-copy]=6002

port=6100
for spec in "${PEERS[@]}"; do
  name=${spec%%=*}; cmd=${spec#*=}
  port=$((port + 1))
  if [[ "$spec" == "$name" ]]; then
    case "$name" in
      socat) cmd='socat TCP-LISTEN:{listen},bind=127.0.0.1,fork,reuseaddr TCP:127.0.0.1:{target}';;
      haproxy)
        cat >"$RAW/haproxy.cfg" <<HAP
global
  maxconn 1000
defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h
frontend f
  bind 127.0.0.1:{listen}
  default_backend b
backend b
  server s 127.0.0.1:{target}
HAP
        sed -i "s/{listen}/$port/; s/{target}/$SERVER/" "$RAW/haproxy.cfg"
        cmd="haproxy -db -f $RAW/haproxy.cfg";;
      *) echo "unknown built-in peer $name (use NAME='CMD')" >&2; exit 2;;
    esac
  fi
  cmd=${cmd//\{listen\}/$port}; cmd=${cmd//\{target\}/$SERVER}
  NAME=$name; PID[$name]=$(start_bg X=1 sh -c "exec $cmd"); PIDS+=(${PID[$name]}); PORT[$name]=$port
  VARIANTS+=("$name")
done
sleep 1

# The process doing the forwarding: the pid we started (ip netns exec execs, env execs).
proc_cpu() { # pid -> CPU seconds incl. reaped children
  [[ -n "$1" && -r /proc/$1/stat ]] || { echo 0; return; }
  python3 - "$1" <<'PY'
import os, sys
f = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()
print(sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK"))
PY
}
sys_busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8)/100}' /proc/stat; }

for r in $(seq 1 "$REPEATS"); do
  for v in "${VARIANTS[@]}"; do
    c0=$(proc_cpu "${PID[$v]}"); s0=$(sys_busy)
    nsx iperf3 -c 127.0.0.1 -p "${PORT[$v]}" -t "$TIME" -J >"$RAW/$v.$r.json" || echo "iperf3 failed for $v" >&2
    sleep 0.3
    c1=$(proc_cpu "${PID[$v]}"); s1=$(sys_busy)
    echo "{\"variant\":\"$v\",\"repeat\":$r,\"proc_cpu_s\":$(python3 -c "print(round($c1-$c0,2))"),\"sys_cpu_s\":$(python3 -c "print(round($s1-$s0,2))")}" >>"$RAW/cpu.jsonl"
    echo "run $r $v done" >&2
  done
done

if [[ $CAPS == 1 ]]; then
  cport=6200
  for cap in 1000000 1250000 12500000; do
    cport=$((cport + 1))
    fwc_config $cport $cap >"$RAW/cap-$cap.json"
    NAME=cap-$cap; p=$(start_bg X=1 "$FWC" forward --config "$RAW/cap-$cap.json"); PIDS+=($p)
    sleep 0.5
    nsx iperf3 -c 127.0.0.1 -p $cport -t 13 -O 3 -R -J >"$RAW/cap-$cap.iperf.json" || echo "iperf3 failed for cap $cap" >&2
    kill "$p"; wait "$p" 2>/dev/null || true
    echo "cap $cap done" >&2
  done
fi

python3 "$HERE/report.py" "$RAW" "$OUT" "$REPEATS" "$TIME" "${VARIANTS[@]}"
