#!/usr/bin/env bash
# UDP datagram rate through fwc's userspace forwarder: the one-datagram-per-syscall build
# against the batched (recvmmsg/sendmmsg) build, over loopback inside a throwaway network
# namespace (deleted on exit, whatever happens). Needs root, iperf3, ip, python3 (and git
# for --old-ref).
#
#   bench/forward/udp.sh [--repeats 5] [--time 5] [--sizes "64 1400"] [--rates "0 40000"]
#                        [--out DIR] [--fwc PATH] [--fwc-old PATH | --old-ref REF]
#                        [--fwc-var NAME='[FWC=PATH] [ENV=VALUE ...]'] [--peer portunus]
#   bench/forward/udp.sh --report DIR    # only rebuild the summary from DIR/udp-raw
#
# Variants, run alternately (direct fwc-old fwc-new direct …) for every datagram size and
# direction and offered rate, REPEATS times each, medians reported:
#   direct    iperf3 client -> iperf3 server
#   fwc-old   `fwc forward --config`, the binary --fwc-old, or built from git REF
#             (--old-ref; a temporary `git worktree`, removed on exit); left out if neither
#   fwc-new   `fwc forward --config`, the binary --fwc, or built from this tree
#   --fwc-var one more `fwc forward` with environment variables (and FWC=PATH, another
#             binary); named fwc-old it is the reference of the new/old columns, e.g.
#             --fwc-var fwc-old='FWC_FORWARD_UDP_OFFLOAD=0' (batching without GRO/GSO)
#   portunus  --peer portunus: Portunus's `portunus-standalone` (AGPL, a bench peer only),
#             the binary $PORTUNUS (bench/forward/peers/portunus.md); a tcp rule (iperf3's
#             control connection) and a udp rule on one port
# Directions: up   = iperf3 -u      (client -> listener -> session socket -> server)
#             down = iperf3 -u -R   (server -> session socket -> listener -> client)
# Rates: datagrams/s offered by the sender; 0 = as fast as it can (iperf3 -b 0), else
# iperf3 -b RATE*SIZE*8 (paced by iperf3 in ~1 ms steps).
# One run: iperf3 -c 127.0.0.1 -p PORT -u -b BITS -l SIZE -t TIME -J [-R] (one stream);
# each forwarder listens on PORT for TCP (iperf3's control connection) and UDP, target
# 127.0.0.1:5201.
# Reported per run: datagrams/s sent and received and Mbit/s received (iperf3), loss %
# (iperf3's sequence numbers), datagrams/s the forwarder forwarded (its byte counters over the
# control socket, --state-dir), CPU seconds of the forwarder process (utime+stime) and its CPU
# per forwarded datagram.
# Output: DIR/udp-results.json, DIR/udp-results.md, raw iperf3 JSON in DIR/udp-raw/
# (default DIR: bench/forward/out/). Builds use CARGO_TARGET_DIR (default ROOT/target), the
# --old-ref build CARGO_TARGET_DIR/udp-bench-old.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REPEATS=5
TIME=5
SIZES="64 1400"
RATES="0 40000"
OUT="$HERE/out"
FWC=""
FWC_OLD=""
OLD_REF=""
REPORT_ONLY=0
FWCVARS=()
PEERS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2;;
    --time) TIME=$2; shift 2;;
    --sizes) SIZES=$2; shift 2;;
    --rates) RATES=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --fwc) FWC=$2; shift 2;;
    --fwc-old) FWC_OLD=$2; shift 2;;
    --old-ref) OLD_REF=$2; shift 2;;
    --report) REPORT_ONLY=1; OUT=$2; shift 2;;
    --fwc-var) FWCVARS+=("$2"); shift 2;;
    --peer) PEERS+=("$2"); shift 2;;
    -h|--help) sed -n '2,37p' "$0"; exit 0;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2;;
  esac
done
report() { # summarise $OUT/udp-raw -> udp-results.{json,md}
  python3 - "$OUT/udp-raw" "$OUT" <<'PY'
import json, os, platform, statistics, subprocess, sys
raw, out = sys.argv[1:3]
m = json.load(open(os.path.join(raw, "meta.json")))
repeats, secs, load0, load1, variants = m["repeats"], m["time"], m["load0"], m["load1"], m["variants"]
runs = [json.loads(l) for l in open(os.path.join(raw, "runs.jsonl"))]
for r in runs:
    try:
        e = json.load(open(os.path.join(raw, r["file"])))["end"]
        rx, tx = e["sum_received"], e["sum_sent"]
        got = rx["packets"] - rx["lost_packets"]
        r.update(pps=got / rx["seconds"], sent_pps=tx["packets"] / tx["seconds"],
                 mbps=rx["bytes"] * 8 / rx["seconds"] / 1e6, loss=rx["lost_percent"])
        if r["variant"] != "direct":
            fwd = r["fwd_bytes"] / r["size"]
            r.update(fwd_pps=fwd / tx["seconds"] if fwd else None, cpu_us=r["proc_cpu_s"] / fwd * 1e6 if fwd else None,
                     cpu_us_rx=r["proc_cpu_s"] / got * 1e6 if got else None)
    except Exception as ex:  # a failed run: reported, left out of the medians
        r.update(pps=None, error=str(ex))
def med(rs, k):
    xs = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(xs) if xs else None
rows = []
for rate, size in sorted({(r["rate"], r["size"]) for r in runs}):
    for d in ("up", "down"):
        base = {}
        for v in sorted(variants, key=lambda v: v != "fwc-old"):
            rs = sorted((r for r in runs if (r["rate"], r["size"], r["dir"], r["variant"]) == (rate, size, d, v) and r.get("pps") is not None),
                        key=lambda r: r["repeat"])
            row = {"rate": rate, "size": size, "dir": d, "variant": v, "runs": len(rs)}
            for k in ("pps", "sent_pps", "fwd_pps", "mbps", "loss", "proc_cpu_s", "cpu_us", "cpu_us_rx"):
                row[k] = med(rs, k)
            row["all_pps"] = [round(r["pps"]) for r in rs]
            row["all_cpu_us"] = [round(r["cpu_us"], 2) for r in rs if r.get("cpu_us") is not None]
            row["udp_dropped"] = sum(r.get("udp_dropped", 0) for r in rs)
            if v == "fwc-old":
                base = row
            if v != "fwc-old" and v != "direct" and base:
                row["pps_vs_old"] = row["pps"] / base["pps"] if row["pps"] and base["pps"] else None
                row["fwd_vs_old"] = row["fwd_pps"] / base["fwd_pps"] if row["fwd_pps"] and base["fwd_pps"] else None
                row["cpu_vs_old"] = row["cpu_us"] / base["cpu_us"] if row["cpu_us"] and base["cpu_us"] else None
                row["cpu_rx_vs_old"] = row["cpu_us_rx"] / base["cpu_us_rx"] if row["cpu_us_rx"] and base["cpu_us_rx"] else None
            rows.append(row)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
iperf = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
meta = {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "iperf3": iperf,
        "repeats": int(repeats), "time_s": float(secs), "loadavg_before": load0, "loadavg_after": load1}
json.dump({"meta": meta, "rows": rows, "runs": runs}, open(os.path.join(out, "udp-results.json"), "w"), indent=1)
f = lambda x, n=0: "" if x is None else f"{x:,.{n}f}"
lines = [f"{meta['cpus']} CPUs ({cpu}), Linux {meta['kernel']}, {iperf}; {repeats} x {secs} s per cell; "
         f"load average {load0} before, {load1} after. Medians; datagrams/s at the receiver unless noted.", "",
         "| offered/s | size | dir | variant | received/s | vs fwc-old | fwc forwarded/s | vs fwc-old | sent/s | Mbit/s | loss % | forwarder CPU s | CPU µs / forwarded datagram | vs fwc-old | CPU µs / received datagram | vs fwc-old | all runs: received/s | all runs: CPU µs / datagram |",
         "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
for r in rows:
    lines.append(f"| {'max' if r['rate'] == 0 else f(r['rate'])} | {r['size']} | {r['dir']} | {r['variant']} | {f(r['pps'])} | {f(r.get('pps_vs_old'), 2)} | {f(r['fwd_pps'])} | {f(r.get('fwd_vs_old'), 2)} | "
                 f"{f(r['sent_pps'])} | {f(r['mbps'], 1)} | {f(r['loss'], 1)} | {f(r['proc_cpu_s'], 2)} | {f(r['cpu_us'], 2)} | "
                 f"{f(r.get('cpu_vs_old'), 2)} | {f(r['cpu_us_rx'], 2)} | {f(r.get('cpu_rx_vs_old'), 2)} | {', '.join(f(x) for x in r['all_pps'])} | {', '.join(f(x, 2) for x in r['all_cpu_us'])} |")
open(os.path.join(out, "udp-results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
}
if [[ $REPORT_ONLY == 1 ]]; then report; exit 0; fi
[[ $(id -u) == 0 ]] || { echo "needs root (network namespace)" >&2; exit 1; }
for t in iperf3 ip python3; do command -v $t >/dev/null || { echo "missing $t" >&2; exit 1; }; done
[[ -z "$FWC_OLD" || -z "$OLD_REF" ]] || { echo "--fwc-old and --old-ref exclude each other" >&2; exit 2; }

mkdir -p "$OUT"
RAW="$OUT/udp-raw"; rm -rf "$RAW"; mkdir -p "$RAW"
NS="fwc-t-udp-$$"
WT=""
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in $(ip netns pids "$NS" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
  if [[ -n "$WT" ]]; then git -C "$ROOT" worktree remove --force "$WT" 2>/dev/null || true; rm -rf "$WT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
build() { # source dir, target dir -> copies its release fwc to $3
  (cd "$1" && CARGO_TARGET_DIR=$2 nice -n 10 cargo build -q --release -p fwc-runtime --bin fwc)
  cp "$2/release/fwc" "$3"
}
if [[ -n "$OLD_REF" ]]; then
  WT=$(mktemp -d /tmp/fwc-udp-old.XXXXXX)
  git -C "$ROOT" worktree add --detach "$WT" "$OLD_REF" >/dev/null
  # A target dir of its own: cargo names workspace crates by their path relative to the
  # workspace, so the worktree's build would pass for (and replace) this tree's in a shared one.
  build "$WT" "$TARGET/udp-bench-old" "$RAW/fwc-old"; FWC_OLD="$RAW/fwc-old"
  echo "built fwc-old from $OLD_REF ($(git -C "$WT" rev-parse --short HEAD))" >&2
fi
if [[ -z "$FWC" ]]; then build "$ROOT" "$TARGET" "$RAW/fwc-new"; FWC="$RAW/fwc-new"; fi

ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
nsx() { ip netns exec "$NS" "$@"; }

SERVER=5201
# Not through nsx: a function run with & is a subshell, which would leave iperf3 to init when
# it is killed; started here, cleanup reaps it and ../shared/quiet counts its CPU as ours.
ip netns exec "$NS" iperf3 -s -p $SERVER >"$RAW/iperf3-server.log" 2>&1 & PIDS+=($!)

fwc_config() { # port -> forward.json with a TCP and a UDP listener on it
  python3 - "$1" "$SERVER" <<'PY'
import json, sys
port, server = int(sys.argv[1]), int(sys.argv[2])
def listener(proto):
    return {"rule": f"bench-{proto}-{port}", "proto": proto, "listen_addr": "127.0.0.1",
            "listen_port": port, "targets": [{"host": "127.0.0.1", "port": server}],
            "allow_from": [], "up_bytes_per_sec": None, "down_bytes_per_sec": None,
            "burst_bytes": None, "max_conns": None, "conn_rate": None, "proxy_protocol": None,
            "idle_timeout_ms": 60000, "connect_timeout_ms": 5000}
print(json.dumps({"version": 1, "listeners": [listener("tcp"), listener("udp")]}))
PY
}

declare -A PORT PID
VARIANTS=(direct)
PORT[direct]=$SERVER; PID[direct]=""
start_fwc() { # name port binary [ENV=VALUE ...]
  fwc_config "$2" >"$RAW/$1.json"
  # ip netns exec and env exec the binary: $! is the forwarder itself. --state-dir: its counters.
  ip netns exec "$NS" env X=1 "${@:4}" "$3" forward --config "$RAW/$1.json" --state-dir "$RAW/$1.state" >"$RAW/$1.log" 2>&1 &
  PID[$1]=$!; PIDS+=($!); PORT[$1]=$2; VARIANTS+=("$1")
}
fwc_bytes() { # name port -> "bytes_up bytes_down udp_dropped" of its UDP rule (0 0 0 for direct and peers)
  [[ -n "${PID[$1]}" && -S "$RAW/$1.state/forwarder.sock" ]] || { echo "0 0 0"; return; }
  python3 - "$RAW/$1.state/forwarder.sock" "bench-udp-$2" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"op":"status"}\n')
d = b""
while not d.endswith(b"\n"):
    d += s.recv(1 << 20)
r = next(r for r in json.loads(d)["status"]["rules"] if r["rule"] == sys.argv[2])
print(r["bytes_up"], r["bytes_down"], r["udp_dropped"])
PY
}
[[ -n "$FWC_OLD" ]] && start_fwc fwc-old 6001 "$FWC_OLD"
start_fwc fwc-new 6002 "$FWC"
vport=6010
for spec in "${FWCVARS[@]}"; do
  name=${spec%%=*}; bin=$FWC; vars=()
  for kv in ${spec#*=}; do if [[ $kv == FWC=* ]]; then bin=${kv#FWC=}; else vars+=("$kv"); fi; done
  vport=$((vport + 1)); start_fwc "$name" $vport "$bin" "${vars[@]}"
done
for name in "${PEERS[@]}"; do
  vport=$((vport + 1))
  case "$name" in
    portunus)
      [[ -x "${PORTUNUS:-}" ]] || { echo "--peer portunus needs PORTUNUS=/path/to/portunus-standalone (bench/forward/peers/portunus.md)" >&2; exit 2; }
      printf '[global]\nlog_level = "error"\n\n[stats]\nenabled = false\n\n[[rule]]\nname = "ctl"\nprotocol = "tcp"\nlisten_port = %s\ntarget = "127.0.0.1:%s"\n\n[[rule]]\nname = "data"\nprotocol = "udp"\nlisten_port = %s\ntarget = "127.0.0.1:%s"\n' \
        $vport $SERVER $vport $SERVER >"$RAW/portunus.toml"
      ip netns exec "$NS" "$PORTUNUS" --no-stats --config "$RAW/portunus.toml" >"$RAW/portunus.log" 2>&1 &
      PID[portunus]=$!; PIDS+=($!); PORT[portunus]=$vport; VARIANTS+=(portunus);;
    *) echo "unknown peer $name (portunus)" >&2; exit 2;;
  esac
done
sleep 1
for v in "${VARIANTS[@]}"; do
  [[ -z "${PID[$v]}" ]] || kill -0 "${PID[$v]}" || { echo "$v did not start:" >&2; cat "$RAW/$v.log" >&2; exit 1; }
done

proc_cpu() { # pid -> CPU seconds (utime+stime)
  [[ -n "$1" && -r /proc/$1/stat ]] || { echo 0; return; }
  python3 - "$1" <<'PY'
import os, sys
f = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()
print(sum(int(x) for x in f[11:13]) / os.sysconf("SC_CLK_TCK"))
PY
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$REPEATS"); do
  for rate in $RATES; do
  for size in $SIZES; do
    for dir in up down; do
      for v in "${VARIANTS[@]}"; do
        rflag=(); [[ $dir == down ]] && rflag=(-R)
        c0=$(proc_cpu "${PID[$v]}"); read -r u0 d0 x0 < <(fwc_bytes "$v" "${PORT[$v]}")
        f="$RAW/$v.$rate.$size.$dir.$r.json"
        nsx iperf3 -c 127.0.0.1 -p "${PORT[$v]}" -u -b $((rate * size * 8)) -l "$size" -t "$TIME" -J "${rflag[@]}" >"$f" \
          || echo "iperf3 failed: $v $rate/s $size $dir run $r" >&2
        c1=$(proc_cpu "${PID[$v]}"); read -r u1 d1 x1 < <(fwc_bytes "$v" "${PORT[$v]}")
        if [[ $dir == up ]]; then fwd=$((u1 - u0)); else fwd=$((d1 - d0)); fi
        echo "{\"variant\":\"$v\",\"rate\":$rate,\"size\":$size,\"dir\":\"$dir\",\"repeat\":$r,\"file\":\"$(basename "$f")\",\"proc_cpu_s\":$(python3 -c "print(round($c1-$c0,3))"),\"fwd_bytes\":$fwd,\"udp_dropped\":$((x1 - x0))}" >>"$RAW/runs.jsonl"
        sleep 0.5
      done
      echo "run $r: rate $rate, $size bytes, $dir done" >&2
    done
  done
  done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
python3 -c 'import json, sys; a = sys.argv[1:]; json.dump({"repeats": int(a[0]), "time": float(a[1]), "load0": a[2], "load1": a[3], "variants": a[4:]}, sys.stdout)' \
  "$REPEATS" "$TIME" "$LOAD0" "$LOAD1" "${VARIANTS[@]}" >"$RAW/meta.json"
report
