#!/usr/bin/env bash
# fwc eBPF QoS vs `tc tbf` vs no limit, same run, side by side (see docs/performance.md, "eBPF QoS").
#   sudo bench/qos/run.sh            # DUR=10 RATES="10 100 1000" MIXED_RATES="10 100" LOAD=0.1 override
#   (RATES="" runs only the mixed workload)
# Topology: namespaces S (sender) and C (receiver) joined by a veth; everything S sends is marked
# class 1 by one nft rule; the limiter sits on S's veth egress. Elephant = iperf3 S->C; short
# requests = `rr` (ebpf/examples/rr.rs): new TCP connection per request, 10 KB responses S->C.
# The loader runs under `nsenter --net` (not `ip netns exec`, whose private mount namespace
# hides the host's /sys/fs/bpf, so pins would vanish with the process).
# Prints a markdown report on stdout. Cleans up namespaces, pins and processes on exit.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
# NO_BUILD=1: the examples were built before (no cargo inside a quiet window).
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p fwc-qos --examples
BIN=$CARGO_TARGET_DIR/release/examples
QOSCTL=$BIN/qosctl RR=$BIN/rr
DUR=${DUR:-10} RATES=${RATES-"10 100 1000"} MIXED_RATES=${MIXED_RATES-"10 100"}
T=fb$$ ; S=${T}s C=${T}c SIF=${T}s0 CIF=${T}c0 PIN=/sys/fs/bpf/fwc-bench-$$
SA=198.18.7.1 CA=198.18.7.2

cleanup() {
  nsenter --net=/run/netns/"$S" "$QOSCTL" "$PIN" detach >/dev/null 2>&1 || true
  for ns in "$S" "$C"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  sysctl -qw kernel.bpf_stats_enabled=0 || true
}
trap cleanup EXIT

ip netns add "$S"; ip netns add "$C"
ip link add "$SIF" netns "$S" type veth peer name "$CIF" netns "$C"
ip -n "$S" addr add $SA/24 dev "$SIF"; ip -n "$C" addr add $CA/24 dev "$CIF"
for ns in "$S" "$C"; do ip -n "$ns" link set lo up; done
ip -n "$S" link set "$SIF" up; ip -n "$C" link set "$CIF" up
ip netns exec "$S" nft -f - <<NFT
table inet fwcb {
  chain out {
    type filter hook output priority 0; policy accept;
    meta mark set 0x10000
  }
}
NFT
ip netns exec "$C" iperf3 -s -p 5201 >/dev/null 2>&1 &
ip netns exec "$C" iperf3 -s -p 5202 >/dev/null 2>&1 &
ip netns exec "$S" "$RR" server $SA:8080 10000 >/dev/null 2>&1 &
sleep 1

limit_on() { # mode rate_mbit
  local bytes=$(( $2 * 125000 )) burst
  burst=$(( bytes / 2 > 65536 ? bytes / 2 : 65536 ))
  case $1 in
    tbf) ip netns exec "$S" tc qdisc replace dev "$SIF" root tbf rate "$2"mbit burst "$burst" latency 50ms ;;
    fwc) nsenter --net=/run/netns/"$S" "$QOSCTL" "$PIN" attach "$SIF" 1 "$bytes" "$burst" >/dev/null ;;
    fwc-nofp) nsenter --net=/run/netns/"$S" "$QOSCTL" "$PIN" attach "$SIF" 1 "$bytes" "$burst" nofastpass >/dev/null ;;
  esac
}
limit_off() {
  ip netns exec "$S" tc qdisc del dev "$SIF" root 2>/dev/null || true
  nsenter --net=/run/netns/"$S" "$QOSCTL" "$PIN" detach >/dev/null 2>&1 || true
}
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
prog_ns() { # average ns per run of the attached program, when bpf stats are on
  { bpftool -j prog show pinned "$PIN/prog" 2>/dev/null || true; } | python3 -c 'import json,sys
try:
  p=json.load(sys.stdin); print("%.0f" % (p["run_time_ns"]/max(p["run_cnt"],1)))
except Exception: print("-")'
}

# iperf3 receiver goodput (steady state: first 2 s omitted) -> wire-equivalent Mbit/s.
# TCP: 1448-byte MSS segments are 1514 bytes on the wire. UDP: receiver rx_bytes (no GSO).
run_iperf() { # proto rate_mbit -> "wire_mbit cpu_pct"
  local args=(-c $CA -p 5201 -J -O 2 -t "$DUR") out rx1 rx2 t1 t2
  read -r b0 t0 < <(busy)
  if [ "$1" = udp ]; then
    # UDP has no GSO here: the receiver's rx_bytes are wire bytes. Window: 2 s .. DUR-0.5 s.
    ip netns exec "$S" iperf3 -c $CA -p 5201 -t "$DUR" -u -b "$(( $2 * 2 ))M" -l 1400 >/dev/null &
    local ip=$!
    sleep 2; rx1=$(ip netns exec "$C" cat /sys/class/net/"$CIF"/statistics/rx_bytes); t1=$(date +%s.%N)
    sleep "$(python3 -c "print($DUR - 2.5)")"
    rx2=$(ip netns exec "$C" cat /sys/class/net/"$CIF"/statistics/rx_bytes); t2=$(date +%s.%N)
    wait $ip || true
    out="{\"udp\": $(python3 -c "print(($rx2-$rx1)*8/($t2-$t1))")}"
  else
    out=$(ip netns exec "$S" iperf3 "${args[@]}" -P 4)
  fi
  read -r b1 t1 < <(busy)
  python3 - "$1" "$out" "$b0" "$t0" "$b1" "$t1" <<'PY'
import json,sys
proto,out,b0,t0,b1,t1=sys.argv[1],json.loads(sys.argv[2]),*map(float,sys.argv[3:])
if proto=="udp":
    recv=out["udp"]
else:
    recv=out["end"]["sum_received"]["bits_per_second"]*1514/1448
print("%.2f %.0f" % (recv/1e6, 100*(b1-b0)/(t1-t0)*2))
PY
}

echo "# fwc eBPF QoS vs tc tbf vs no limit"
echo
echo "machine: $(nproc) cores, $(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); DUR=${DUR}s; $(date -u +%F)"
echo
echo "## Cap accuracy and CPU (receiver, wire-equivalent, first 2 s omitted)"
echo
echo "| traffic | cap | none Mbit/s | tbf Mbit/s (ratio) | fwc Mbit/s (ratio) | CPU% none / tbf / fwc (of 200) | fwc prog ns/pkt |"
echo "|---|---|---|---|---|---|---|"
sysctl -qw kernel.bpf_stats_enabled=1
for proto in tcp udp; do
  for r in $RATES; do
    [ "$proto" = udp ] && [ "$r" -ge 1000 ] && continue  # iperf3 cannot offer 2 Gbit/s UDP on 2 cores
    declare -A R=() P=()
    for m in none tbf fwc; do
      limit_off; limit_on $m "$r"
      read -r mb cpu < <(run_iperf $proto "$r")
      R[$m]=$mb P[$m]=$cpu
      [ $m = fwc ] && NS=$(prog_ns)
      limit_off
    done
    ratio() { python3 -c "print('%.3f' % ($1/$2))"; }
    echo "| $proto -P$([ $proto = tcp ] && echo 4 || echo 1) | ${r}M | ${R[none]} | ${R[tbf]} ($(ratio ${R[tbf]} $r)) | ${R[fwc]} ($(ratio ${R[fwc]} $r)) | ${P[none]} / ${P[tbf]} / ${P[fwc]} | $NS |"
  done
done

echo
# One mixed run: the elephant (unless mode is "alone") plus `rr` clients for DUR s.
# $3 = requests/s (open loop, 64 workers) or "closed" (16 closed-loop workers).
mixed_run() { # mode rate_mbit rps|closed -> markdown row
  local m=$1 r=$2 load=$3 el="-" EP="" rr
  limit_off; [ "$m" = alone ] || limit_on "$m" "$r"
  if [ "$m" != alone ]; then
    ip netns exec "$S" iperf3 -c $CA -p 5202 -J -t $(( DUR + 3 )) > /tmp/$T-eleph.json &
    EP=$!
    sleep 2
  fi
  if [ "$load" = closed ]; then
    rr=$(ip netns exec "$C" "$RR" client $SA:8080 10000 16 "$DUR")
  else
    rr=$(ip netns exec "$C" "$RR" client $SA:8080 10000 64 "$DUR" "$load")
  fi
  if [ -n "$EP" ]; then
    wait $EP || true
    el=$(python3 -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]*1514/1448/1e6))' /tmp/$T-eleph.json)
  fi
  limit_off
  python3 - "$r" "$m" "$el" "$rr" <<'PY'
import json,sys
r,m,el,rr=sys.argv[1],sys.argv[2],sys.argv[3],json.loads(sys.argv[4])
short=rr["rps"]*10000*8/1e6
print("| %sM | %s | %s | %.0f (%.1f Mbit/s) | %.2f | %.2f | %d |" % (r,m,el,rr["rps"],short,rr["p50_ms"],rr["p99_ms"],rr["errors"]))
PY
}

LOAD=${LOAD:-0.1}
echo "## Mixed: one capped elephant + short requests in the same class"
echo
echo "Elephant: iperf3 TCP, 1 stream, S->C. Requests: a new TCP connection per request, 10 KB response, ${DUR}s."
echo "\`alone\` = the requests without elephant and without limiter; \`none\` = with the elephant, no limiter (the uncapped baseline)."
echo
echo "### Open loop: requests at a fixed rate, ${LOAD} of the cap (latency from each request's due time)"
echo
echo "| cap | limiter | elephant Mbit/s (wire) | requests/s (goodput) | p50 ms | p99 ms | errors |"
echo "|---|---|---|---|---|---|---|"
for r in $MIXED_RATES; do
  rps=$(python3 -c "print('%.1f' % ($r * 125000 * $LOAD / 10000))")
  for m in alone none tbf fwc fwc-nofp; do mixed_run $m "$r" "$rps"; done
done
echo
echo "### Closed loop: 16 clients back to back (the requests alone want more than the cap)"
echo
echo "| cap | limiter | elephant Mbit/s (wire) | requests/s (goodput) | p50 ms | p99 ms | errors |"
echo "|---|---|---|---|---|---|---|"
for r in $MIXED_RATES; do
  for m in none tbf fwc fwc-nofp; do mixed_run $m "$r" closed; done
done
rm -f /tmp/$T-eleph.json
