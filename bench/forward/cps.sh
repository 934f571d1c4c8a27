#!/usr/bin/env bash
# Connections per second through TCP forwarders, over loopback in a throwaway network
# namespace (deleted on exit). Each connection sends PAYLOAD bytes, half-closes, reads the
# echo to EOF and checks it byte for byte; the client and the echo server are
# `fwc-bench-cps` (native threads; bench/src/bin/fwc-bench-cps.rs). Needs root, ip, python3.
#
#   bench/forward/cps.sh [--rounds 9] [--conns 2000] [--payload 64] [--threads 4] [--out DIR]
#                        [--fwc PATH] [--peer realm] [--peer portunus] [--peer haproxy]
#                        [--fwc-var NAME='[FWC=PATH] [ENV=VALUE ...]'] [--kernel]
# CPS=PATH and REALM=PATH use binaries built before instead of running cargo.
# --kernel adds the bounds no relay can pass: `direct` (the client connects to the echo server
# itself: one TCP connection per round trip) and `nft-redirect` (nftables `redirect` in the nat
# output hook: still one connection, rewritten by the kernel).
#
# Variants alternate round by round (fwc realm portunus … fwc realm portunus …): fwc is
# `fwc forward --config` (splice); --fwc-var adds `fwc forward` with other environment
# variables or another binary; peers as in bench/forward/run.sh (portunus needs
# PORTUNUS=/path/to/portunus-standalone, see bench/forward/peers/portunus.md). Per round:
# connections/s, failed connections, the forwarder's CPU (utime+stime) per 1000 connections,
# the 1-minute load average. Output: DIR/cps.jsonl and DIR/cps.md (default
# bench/forward/out/), medians per variant.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=9 CONNS=2000 PAYLOAD=64 THREADS=4 OUT="$HERE/out" FWC=""
PEERS=() FWCVARS=() KERNEL=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2;;
    --conns) CONNS=$2; shift 2;;
    --payload) PAYLOAD=$2; shift 2;;
    --threads) THREADS=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --fwc) FWC=$2; shift 2;;
    --peer) PEERS+=("$2"); shift 2;;
    --fwc-var) FWCVARS+=("$2"); shift 2;;
    --kernel) KERNEL=1; shift;;
    -h|--help) sed -n '2,22p' "$0"; exit 0;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "needs root (network namespace)" >&2; exit 1; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ -z "$FWC" ]]; then
  (cd "$ROOT" && cargo build -q --release -p fwc-runtime --bin fwc)
  FWC="$CARGO_TARGET_DIR/release/fwc"
fi
# CPS=PATH, REALM=PATH: binaries built before (no cargo inside a quiet window).
if [[ -z "${CPS:-}" ]]; then
  (cd "$ROOT" && cargo build -q --release -p fwc-bench --bin fwc-bench-cps)
  CPS="$CARGO_TARGET_DIR/release/fwc-bench-cps"
fi
mkdir -p "$OUT"; RAW="$OUT/cps-raw"; rm -rf "$RAW"; mkdir -p "$RAW"

NS="fwc-t-cps-$$"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in $(ip netns pids "$NS" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$NS"; ip -n "$NS" link set lo up
nsx() { ip netns exec "$NS" "$@"; }
# Long-lived processes are children of this shell (not of a $(…) subshell, which would leave
# them to init): cleanup reaps them, so ../shared/quiet counts their CPU as the benchmark's own.
start_bg() { ip netns exec "$NS" env "$@" >"$RAW/$NAME.log" 2>&1 & BGPID=$!; }

SERVER=7000
NAME=echo; start_bg X=1 "$CPS" echo 127.0.0.1:$SERVER --threads "$THREADS"; PIDS+=($BGPID)

fwc_config() { # port -> forward.json
  printf '{"version":1,"listeners":[{"rule":"cps","proto":"tcp","listen_addr":"127.0.0.1","listen_port":%s,"targets":[{"host":"127.0.0.1","port":%s}],"allow_from":[],"up_bytes_per_sec":null,"down_bytes_per_sec":null,"burst_bytes":null,"max_conns":null,"conn_rate":null,"proxy_protocol":null,"idle_timeout_ms":3600000,"connect_timeout_ms":5000}]}\n' "$1" "$SERVER"
}
declare -A PORT PID
VARIANTS=()
port=7100
add_fwc() { # name bin env...
  local name=$1 bin=$2; shift 2
  port=$((port + 1)); fwc_config $port >"$RAW/$name.json"
  NAME=$name; start_bg "$@" "$bin" forward --config "$RAW/$name.json"; PID[$name]=$BGPID; PIDS+=($BGPID); PORT[$name]=$port
  VARIANTS+=("$name")
}
add_fwc fwc "$FWC" X=1
for spec in "${FWCVARS[@]}"; do
  name=${spec%%=*}; bin=$FWC; vars=(X=1)
  for kv in ${spec#*=}; do if [[ $kv == FWC=* ]]; then bin=${kv#FWC=}; else vars+=("$kv"); fi; done
  add_fwc "$name" "$bin" "${vars[@]}"
done
for name in "${PEERS[@]}"; do
  port=$((port + 1))
  case "$name" in
    realm)
      if [[ -z "${REALM:-}" ]]; then
        (cd "$HERE/peers/realm" && CARGO_TARGET_DIR=$CARGO_TARGET_DIR/peers cargo build -q --release)
      fi
      cmd="${REALM:-$CARGO_TARGET_DIR/peers/release/realm-peer} 127.0.0.1:$port 127.0.0.1:$SERVER";;
    portunus)
      [[ -x "${PORTUNUS:-}" ]] || { echo "--peer portunus needs PORTUNUS=/path/to/portunus-standalone (bench/forward/peers/portunus.md)" >&2; exit 2; }
      printf '[global]\nlog_level = "error"\n\n[stats]\nenabled = false\n\n[[rule]]\nname = "cps"\nprotocol = "tcp"\nlisten_port = %s\ntarget = "127.0.0.1:%s"\n' "$port" "$SERVER" >"$RAW/portunus.toml"
      cmd="$PORTUNUS --no-stats --config $RAW/portunus.toml";;
    haproxy)
      printf 'global\n  maxconn 8000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1h\n  timeout server 1h\nfrontend f\n  bind 127.0.0.1:%s\n  default_backend b\nbackend b\n  server s 127.0.0.1:%s\n' "$port" "$SERVER" >"$RAW/haproxy.cfg"
      cmd="haproxy -db -f $RAW/haproxy.cfg";;
    *) echo "unknown peer $name (realm, portunus, haproxy)" >&2; exit 2;;
  esac
  NAME=$name; start_bg X=1 sh -c "exec $cmd"; PID[$name]=$BGPID; PIDS+=($BGPID); PORT[$name]=$port
  VARIANTS+=("$name")
done
if [[ $KERNEL == 1 ]]; then
  PORT[direct]=$SERVER; PID[direct]=""; VARIANTS+=(direct)
  port=$((port + 1)); PORT[nft-redirect]=$port; PID[nft-redirect]=""; VARIANTS+=(nft-redirect)
  nsx nft -f - <<NFT
table ip fwcbench {
  chain out { type nat hook output priority -100; tcp dport $port redirect to :$SERVER; }
}
NFT
fi
sleep 1

proc_cpu() { # pid -> CPU seconds (utime+stime+children); no process (a kernel variant): 0
  [[ -n "$1" ]] || { echo 0; return; }
  awk '{print ($14+$15+$16+$17)/100}' "/proc/$1/stat" 2>/dev/null || echo 0
}
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8)/100}' /proc/stat; }   # user nice system irq softirq
: >"$RAW/cps.jsonl"
for r in $(seq 1 "$ROUNDS"); do
  for v in "${VARIANTS[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    c0=$(proc_cpu "${PID[$v]}"); m0=$(busy)
    res=$(nsx "$CPS" connect 127.0.0.1:${PORT[$v]} --conns "$CONNS" --threads "$THREADS" --payload "$PAYLOAD")
    c1=$(proc_cpu "${PID[$v]}"); m1=$(busy)
    echo "{\"variant\":\"$v\",\"round\":$r,\"load1\":$load,\"cpu_s\":$(awk "BEGIN{print $c1-$c0}"),\"machine_cpu_s\":$(awk "BEGIN{print $m1-$m0}"),\"result\":$res}" >>"$RAW/cps.jsonl"
    echo "round $r $v: $res" >&2
  done
done
cp "$RAW/cps.jsonl" "$OUT/cps.jsonl"

python3 - "$RAW/cps.jsonl" "$OUT/cps.md" "$PAYLOAD" "$CONNS" "$THREADS" "${VARIANTS[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out, payload, conns, threads, variants = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
md = [f"{conns} connections per round, {threads} client threads, {payload} bytes each way per connection; medians of {max(r['round'] for r in rows)} alternating rounds.", "",
      "| variant | connections/s (median) | vs fwc | all rounds | forwarder CPU ms per 1000 conns | machine CPU ms per 1000 conns | failed | load avg |", "|---|---:|---:|---|---:|---:|---:|---|"]
med = {}
for v in variants:
    rs = [r for r in rows if r["variant"] == v]
    med[v] = statistics.median(r["result"]["per_sec"] for r in rs)
for v in variants:
    rs = [r for r in rows if r["variant"] == v]
    cpu = statistics.median(1000 * 1000 * r["cpu_s"] / r["result"]["conns"] for r in rs)
    mcpu = statistics.median(1000 * 1000 * r.get("machine_cpu_s", 0) / r["result"]["conns"] for r in rs)
    md.append("| {} | {:.0f} | {:.2f} | {} | {} | {:.0f} | {} | {} |".format(v, med[v], med[v] / med[variants[0]],
        ", ".join(f"{r['result']['per_sec']:.0f}" for r in rs), "(kernel)" if v in ("direct", "nft-redirect") else f"{cpu:.0f}",
        mcpu, sum(r["result"]["failed"] for r in rs),
        f"{min(r['load1'] for r in rs)}–{max(r['load1'] for r in rs)}"))
open(out, "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
