#!/usr/bin/env bash
# Throughput and cap-accuracy bench of fwc's userspace forwarder, in throwaway network
# namespaces (deleted on exit). Needs root, iperf3, nft, ip, python3.
#
#   bench/forward/run.sh [--topology loopback|veth] [--repeats 5] [--time 5] [--out DIR]
#                        [--fwc PATH] [--no-caps] [--no-copy] [--counters] [--latency] [--peer NAME='CMD'] ...
#                        [--fwc-var NAME='[FWC=PATH] [ENV=VALUE ...]'] ...
#
# Topologies:
#   loopback (default)  client, forwarder and server in one namespace, over 127.0.0.1
#   veth                client ns --veth-- forwarder ns --veth-- server ns (198.18.1.0/24 and
#                       198.18.2.0/24): the forwarder host of an edge box, where the kernel
#                       alternative is DNAT + routing instead of a local redirect
# Variants, run alternately (A B C D A B C D …), REPEATS times each, medians reported:
#   direct        iperf3 client -> iperf3 server (veth: routed through the forwarder ns)
#   nft-redirect  loopback: nftables `redirect` (nat output hook) to the server port
#   nft-dnat      veth: nftables `dnat` (nat prerouting) to the server, routed
#   fwc-splice    `fwc forward --config` (splice(2))
#   fwc-copy      the same with FWC_FORWARD_SPLICE=0 (buffered copy)
#   peers         --peer NAME='CMD', CMD with {listen} (port to listen on) and {target}
#                 (server port), {laddr} (address to listen on) and {taddr} (server address),
#                 e.g.  --peer socat='socat TCP-LISTEN:{listen},fork,reuseaddr TCP:{taddr}:{target}'
#                 Built in: --peer socat, --peer haproxy (if installed), --peer realm (realm's
#                 relay library, built from bench/forward/peers/realm on first use, or the
#                 binary $REALM built before),
#                 --peer portunus (Portunus's `portunus-standalone`, AGPL, never part of fwc:
#                 the binary $PORTUNUS, see bench/forward/peers/portunus.md to build it).
#   --fwc-var     one more `fwc forward` (splice) variant with environment variables, and the
#                 binary FWC=PATH if given, e.g. --fwc-var p1m='FWC_FORWARD_PIPE_SIZE=1048576
#                 FWC_FORWARD_PIPE_MAX=1048576' or --fwc-var before='FWC=/tmp/fwc-before'.
# --no-copy leaves out fwc-copy. --counters records, per run, the splice(2) calls of the
# forwarding process, its epoll_wait(2) calls and context switches (its wakeups; `perf stat`), TCP segments sent and received
# in the forwarder's namespace (`nstat` TcpOutSegs/TcpInSegs) and, on veth, the packets the
# forwarder namespace sent on its two veths (tx_packets); reported per GB.
# --latency measures, during every throughput run (the elephant flow), the time a new short
# connection through the same forwarder takes to get its first byte back: the busy iperf3
# server answers a second connection with one byte (ACCESS_DENIED) and closes it, so each
# probe is connect + accept + the relay's setup (and hand-over) + one byte back, every 20 ms
# from the client namespace; p50/p99 in µs per run.
# CPU seconds of the forwarding process (utime+stime, children included) per run, of the
# kernel's worker threads (kworker, ksoftirqd: work a peer defers to them) and of the whole
# machine (/proc/stat busy time) are recorded, with the 1-minute load average before each run
# (other users of the machine show there).
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
FWCVARS=()
COPY=1
COUNTERS=0
LATENCY=0
TOPO=loopback
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2;;
    --topology) TOPO=$2; shift 2;;
    --time) TIME=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --fwc) FWC=$2; shift 2;;
    --no-caps) CAPS=0; shift;;
    --peer) PEERS+=("$2"); shift 2;;
    --fwc-var) FWCVARS+=("$2"); shift 2;;
    --no-copy) COPY=0; shift;;
    --counters) COUNTERS=1; shift;;
    --latency) LATENCY=1; shift;;
    -h|--help) sed -n '2,41p' "$0"; exit 0;;
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

# NS runs the forwarders; CNS the iperf3 client, SNS the server (all three NS for loopback).
NS="fwc-bench-$$"
case "$TOPO" in
  loopback) CNS=$NS SNS=$NS LADDR=127.0.0.1 SADDR=127.0.0.1 NFTV=nft-redirect;;
  veth) CNS=$NS-c SNS=$NS-s LADDR=198.18.1.2 SADDR=198.18.2.2 NFTV=nft-dnat;;
  *) echo "unknown topology $TOPO (loopback or veth)" >&2; exit 2;;
esac
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  # Anything else still inside the namespaces (forked children of a peer) goes too.
  for n in $(printf '%s\n' "$NS" "$CNS" "$SNS" | sort -u); do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    ip netns del "$n" 2>/dev/null || true
  done
}
trap cleanup EXIT
for n in $(printf '%s\n' "$NS" "$CNS" "$SNS" | sort -u); do
  ip netns add "$n"
  ip netns exec "$n" ip link set lo up
done
nsx() { ip netns exec "$NS" "$@"; }
if [[ $TOPO == veth ]]; then
  ip link add fwcb-c$$ netns "$CNS" type veth peer name fwcb-fc$$ netns "$NS"
  ip link add fwcb-s$$ netns "$SNS" type veth peer name fwcb-fs$$ netns "$NS"
  ip -n "$CNS" addr add 198.18.1.1/24 dev fwcb-c$$; ip -n "$NS" addr add 198.18.1.2/24 dev fwcb-fc$$
  ip -n "$SNS" addr add 198.18.2.2/24 dev fwcb-s$$; ip -n "$NS" addr add 198.18.2.1/24 dev fwcb-fs$$
  for l in "$CNS fwcb-c$$" "$NS fwcb-fc$$" "$SNS fwcb-s$$" "$NS fwcb-fs$$"; do set -- $l; ip -n "$1" link set "$2" up; done
  ip -n "$CNS" route add default via 198.18.1.2
  ip -n "$SNS" route add default via 198.18.2.1
  nsx sysctl -qw net.ipv4.ip_forward=1
fi

SERVER=5201
ip netns exec "$SNS" iperf3 -s -p $SERVER >/dev/null 2>&1 & PIDS+=($!)

# The kernel's own forward on port 6000: REDIRECT for local traffic (nat output hook) or, on
# the forwarder host of the veth topology, DNAT in prerouting.
if [[ $TOPO == loopback ]]; then
nsx nft -f - <<NFT
table ip fwcbench {
  chain out { type nat hook output priority -100; tcp dport 6000 redirect to :$SERVER; }
}
NFT
else
nsx nft -f - <<NFT
table ip fwcbench {
  chain pre { type nat hook prerouting priority -100; ip daddr $LADDR tcp dport 6000 dnat to $SADDR:$SERVER; }
}
NFT
fi

fwc_config() { # port up_bytes_per_sec|null
  python3 - "$1" "$2" "$SERVER" "$LADDR" "$SADDR" <<'PY'
import json, sys
port, cap, server, laddr, saddr = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
cap = None if cap == "null" else int(cap)
print(json.dumps({"version": 1, "listeners": [{
  "rule": f"bench-{port}", "proto": "tcp", "listen_addr": laddr, "listen_port": port,
  "targets": [{"host": saddr, "port": server}], "allow_from": [],
  "up_bytes_per_sec": cap, "down_bytes_per_sec": cap, "burst_bytes": None if cap is None else max(cap // 2, 65536),
  "max_conns": None, "conn_rate": None, "proxy_protocol": None,
  "idle_timeout_ms": 3600000, "connect_timeout_ms": 5000}]}))
PY
}

# Every long-lived process is a child of this shell (never started inside $(…), whose subshell
# would leave it to init): cleanup reaps it, so its CPU counts as the benchmark's own for
# ../shared/quiet (`times`) instead of as other work.
start_bg() { # VAR=value... cmd...   (BGPID: the pid of cmd itself: ip netns exec and env exec)
  ip netns exec "$NS" env "$@" >"$RAW/$NAME.log" 2>&1 &
  BGPID=$!
}

declare -A PORT PID
declare -A ADDR
VARIANTS=(direct $NFTV fwc-splice fwc-copy)
PORT[direct]=$SERVER; PID[direct]=""; ADDR[direct]=$SADDR
PORT[$NFTV]=6000; PID[$NFTV]=""

fwc_config 6001 null >"$RAW/fwc-splice.json"
NAME=fwc-splice; start_bg FWC_FORWARD_SPLICE=1 "$FWC" forward --config "$RAW/fwc-splice.json"; PID[fwc-splice]=$BGPID; PIDS+=($BGPID); PORT[fwc-splice]=6001
if [[ $COPY == 1 ]]; then
  fwc_config 6002 null >"$RAW/fwc-copy.json"
  NAME=fwc-copy; start_bg FWC_FORWARD_SPLICE=0 "$FWC" forward --config "$RAW/fwc-copy.json"; PID[fwc-copy]=$BGPID; PIDS+=($BGPID); PORT[fwc-copy]=6002
else
  VARIANTS=(direct $NFTV fwc-splice)
fi
vport=6050
for spec in "${FWCVARS[@]}"; do
  name=${spec%%=*}; envs=${spec#*=}
  vport=$((vport + 1))
  bin=$FWC; vars=()
  for kv in $envs; do
    if [[ $kv == FWC=* ]]; then bin=${kv#FWC=}; else vars+=("$kv"); fi
  done
  fwc_config $vport null >"$RAW/$name.json"
  NAME=$name; start_bg FWC_FORWARD_SPLICE=1 "${vars[@]}" "$bin" forward --config "$RAW/$name.json"; PID[$name]=$BGPID; PIDS+=($BGPID); PORT[$name]=$vport
  VARIANTS+=("$name")
done

port=6100
for spec in "${PEERS[@]}"; do
  name=${spec%%=*}; cmd=${spec#*=}
  port=$((port + 1))
  if [[ "$spec" == "$name" ]]; then
    case "$name" in
      socat) cmd='socat TCP-LISTEN:{listen},bind={laddr},fork,reuseaddr TCP:{taddr}:{target}';;
      realm)
        # realm's relay library (bench/forward/peers/realm), built on first use.
        # REALM=PATH: a binary built before (no cargo inside a quiet window).
        if [[ -z "${REALM:-}" ]]; then
          (cd "$HERE/peers/realm" && CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/peers cargo build -q --release)
        fi
        cmd="${REALM:-${CARGO_TARGET_DIR:-$ROOT/target}/peers/release/realm-peer} {laddr}:{listen} {taddr}:{target}";;
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
  bind $LADDR:{listen}
  default_backend b
backend b
  server s $SADDR:{target}
HAP
        sed -i "s/{listen}/$port/; s/{target}/$SERVER/" "$RAW/haproxy.cfg"
        cmd="haproxy -db -f $RAW/haproxy.cfg";;
      portunus)
        # Portunus's standalone forwarder: a bench peer only (AGPL), never built into fwc.
        PORTUNUS=${PORTUNUS:-}
        [[ -x "$PORTUNUS" ]] || { echo "--peer portunus needs PORTUNUS=/path/to/portunus-standalone (bench/forward/peers/portunus.md)" >&2; exit 2; }
        printf '[global]\nlog_level = "error"\n\n[stats]\nenabled = false\n\n[[rule]]\nname = "bench"\nprotocol = "tcp"\nlisten_port = %s\ntarget = "%s:%s"\n' \
          "$port" "$SADDR" "$SERVER" >"$RAW/portunus.toml"
        cmd="$PORTUNUS --no-stats --config $RAW/portunus.toml";;
      *) echo "unknown built-in peer $name (use NAME='CMD')" >&2; exit 2;;
    esac
  fi
  cmd=${cmd//\{listen\}/$port}; cmd=${cmd//\{target\}/$SERVER}; cmd=${cmd//\{laddr\}/$LADDR}; cmd=${cmd//\{taddr\}/$SADDR}
  NAME=$name; start_bg X=1 sh -c "exec $cmd"; PID[$name]=$BGPID; PIDS+=($BGPID); PORT[$name]=$port
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
# CPU seconds of the kernel's worker threads (kworker, ksoftirqd): work deferred to them (e.g.
# a BPF sockmap's delivery, sk_psock_backlog) is missed by the forwarding process's own times.
kthread_snap() { # FILE: per-thread CPU ticks of kworker/ksoftirqd now
  python3 - "$1" <<'PY'
import glob, json, sys
t = {}
for p in glob.glob("/proc/[0-9]*/stat"):
    try:
        s = open(p).read()
    except OSError:
        continue
    comm = s[s.index("(") + 1:s.rindex(")")]
    if comm.startswith(("kworker", "ksoftirqd")):
        f = s.rsplit(")", 1)[1].split()
        t[p.split("/")[2]] = int(f[11]) + int(f[12])
json.dump(t, open(sys.argv[1], "w"))
PY
}
kthread_delta() { # BEFORE AFTER: CPU seconds those threads used in between (threads that
  # exited in between are not counted, so the sum never goes negative)
  python3 - "$1" "$2" <<'PY'
import json, os, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(round(sum(v - a.get(k, 0) for k, v in b.items()) / os.sysconf("SC_CLK_TCK"), 2))
PY
}

# Packets the forwarder namespace sent on its veths (both directions of the relay), or 0.
veth_tx() {
  if [[ $TOPO == veth ]]; then
    echo $(( $(nsx cat /sys/class/net/fwcb-fc$$/statistics/tx_packets) + $(nsx cat /sys/class/net/fwcb-fs$$/statistics/tx_packets) ))
  else echo 0; fi
}

for r in $(seq 1 "$REPEATS"); do
  for v in "${VARIANTS[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    c0=$(proc_cpu "${PID[$v]}"); kthread_snap "$RAW/k0.json"; s0=$(sys_busy)
    extra=""
    if [[ $COUNTERS == 1 ]]; then
      nsx nstat -n >/dev/null 2>&1 || true   # reset nstat's history: the next call shows deltas
      tx0=$(veth_tx)
      perfpid=""
      if [[ -n "${PID[$v]}" ]]; then
        perf stat -x, -e syscalls:sys_enter_splice,syscalls:sys_enter_epoll_wait,context-switches -p "${PID[$v]}" -o "$RAW/$v.$r.perf" & perfpid=$!
      fi
    fi
    latpid=""
    if [[ $LATENCY == 1 ]]; then
      ip netns exec "$CNS" python3 - "${ADDR[$v]:-$LADDR}" "${PORT[$v]}" "$TIME" >"$RAW/$v.$r.lat" <<'PY' & latpid=$!
import socket, statistics, sys, time
addr, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
time.sleep(1.0)  # the elephant flow is up
xs, errs, end = [], [], time.monotonic() + secs - 1.5
while time.monotonic() < end:
    t = time.perf_counter()
    try:
        s = socket.create_connection((addr, port), timeout=2)
        s.recv(1)
        xs.append((time.perf_counter() - t) * 1e6)
        s.close()
    except OSError as e:
        errs.append(type(e).__name__)
    time.sleep(0.02)
xs.sort()
q = lambda p: round(xs[min(len(xs) - 1, int(p * len(xs)))]) if xs else None
print(f'"lat_n":{len(xs)},"lat_errors":{len(errs)},"lat_p50_us":{q(0.5) or "null"},"lat_p99_us":{q(0.99) or "null"}')
if errs:
    print(f"latency probe errors: {sorted(set(errs))}", file=sys.stderr)
PY
    fi
    ip netns exec "$CNS" iperf3 -c "${ADDR[$v]:-$LADDR}" -p "${PORT[$v]}" -t "$TIME" -J >"$RAW/$v.$r.json" || echo "iperf3 failed for $v" >&2
    if [[ -n "$latpid" ]]; then wait "$latpid" 2>/dev/null || true; extra_lat=",$(cat "$RAW/$v.$r.lat" 2>/dev/null || echo '"lat_n":0')"; else extra_lat=""; fi
    sleep 0.3
    s1=$(sys_busy); c1=$(proc_cpu "${PID[$v]}"); kthread_snap "$RAW/k1.json"
    if [[ $COUNTERS == 1 ]]; then
      tx1=$(veth_tx)
      if [[ -n "$perfpid" ]]; then kill -INT "$perfpid" 2>/dev/null || true; wait "$perfpid" 2>/dev/null || true; fi
      splices=$(awk -F, '/sys_enter_splice/{print $1}' "$RAW/$v.$r.perf" 2>/dev/null | head -1 || true)
      epolls=$(awk -F, '/sys_enter_epoll_wait/{print $1}' "$RAW/$v.$r.perf" 2>/dev/null | head -1 || true)
      cswitches=$(awk -F, '/context-switches/{print $1}' "$RAW/$v.$r.perf" 2>/dev/null | head -1 || true)
      segs=$(nsx nstat TcpOutSegs TcpInSegs 2>/dev/null | awk '/TcpOutSegs/{o=$2} /TcpInSegs/{i=$2} END{print (o+0)","(i+0)}' || true)
      extra=",\"splice_calls\":${splices:-null},\"epoll_waits\":${epolls:-null},\"context_switches\":${cswitches:-null},\"tcp_out_segs\":${segs%,*},\"tcp_in_segs\":${segs#*,},\"veth_tx_packets\":$((tx1 - tx0))"
    fi
    echo "{\"variant\":\"$v\",\"repeat\":$r,\"load1\":$load,\"proc_cpu_s\":$(python3 -c "print(round($c1-$c0,2))"),\"kthread_cpu_s\":$(kthread_delta "$RAW/k0.json" "$RAW/k1.json"),\"sys_cpu_s\":$(python3 -c "print(round($s1-$s0,2))")$extra$extra_lat}" >>"$RAW/cpu.jsonl"
    echo "run $r $v done" >&2
  done
done

if [[ $CAPS == 1 ]]; then
  cport=6200
  for cap in 1000000 1250000 12500000; do
    cport=$((cport + 1))
    fwc_config $cport $cap >"$RAW/cap-$cap.json"
    NAME=cap-$cap; start_bg X=1 "$FWC" forward --config "$RAW/cap-$cap.json"; p=$BGPID; PIDS+=($p)
    sleep 0.5
    ip netns exec "$CNS" iperf3 -c "$LADDR" -p $cport -t 13 -O 3 -R -J >"$RAW/cap-$cap.iperf.json" || echo "iperf3 failed for cap $cap" >&2
    kill "$p"; wait "$p" 2>/dev/null || true
    echo "cap $cap done" >&2
  done
fi

python3 "$HERE/report.py" "$RAW" "$OUT" "$REPEATS" "$TIME" "$TOPO" "${VARIANTS[@]}"
