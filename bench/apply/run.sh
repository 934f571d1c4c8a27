#!/bin/bash
# Apply and kernel-forwarding benchmark (docs/performance.md, "Apply and kernel forwarding").
#
#   sudo bench/apply/run.sh [REPS]        (default 3 repetitions of each traffic measurement)
#
# Needs root, nft, iperf3, python3. Creates the namespaces fwcb-c (client), fwcb-h (fwc host)
# and fwcb-b (backend) joined by veth pairs (198.18.1.0/24, 198.18.2.0/24) and removes them on
# exit. Nothing is loaded into the root namespace. Prints a markdown table and writes
# bench/apply/results.json.
#
# Measures:
#  1. `fwc apply` of 1k and 10k kernel forwards + a 10k-element set, in one transaction
#     (phases as reported by `fwc apply --json`), and the bare `nft -j -f` of that transaction.
#  2. Throughput (iperf3, 5 s) and new-connection rate (fwc-connrate, 5 s, 2 threads) through
#     the last forward, with 10 and 10,000 forwards loaded, as compiled by fwc (DNAT maps) and
#     as a naive ruleset of one `tcp dport N dnat to …` rule per forward.
set -euo pipefail
REPS=${1:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build -q --release -p fwc-runtime -p fwc-bench)
FWC=$CARGO_TARGET_DIR/release/fwc
CR=$CARGO_TARGET_DIR/release/fwc-connrate
WORK=$(mktemp -d /tmp/fwc-bench-apply.XXXXXX)
C=fwcb-c H=fwcb-h B=fwcb-b

cleanup() {
    for ns in $C $H $B; do
        for p in $(ip netns pids $ns 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
        ip netns del $ns 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
cleanup 2>/dev/null || true
WORK=$(mktemp -d /tmp/fwc-bench-apply.XXXXXX)

for ns in $C $H $B; do ip netns add $ns; ip -n $ns link set lo up; done
ip link add fwcb-c0 netns $C type veth peer name fwcb-h0 netns $H
ip link add fwcb-h1 netns $H type veth peer name fwcb-b0 netns $B
ip -n $C addr add 198.18.1.2/24 dev fwcb-c0; ip -n $C link set fwcb-c0 up
ip -n $H addr add 198.18.1.1/24 dev fwcb-h0; ip -n $H link set fwcb-h0 up
ip -n $H addr add 198.18.2.1/24 dev fwcb-h1; ip -n $H link set fwcb-h1 up
ip -n $B addr add 198.18.2.2/24 dev fwcb-b0; ip -n $B link set fwcb-b0 up
ip -n $C route add default via 198.18.1.1
ip netns exec $H sysctl -qw net.ipv4.ip_forward=1

ip netns exec $B iperf3 -s -D -p 5201 >/dev/null
ip netns exec $B "$CR" serve 198.18.2.2:6000 &
sleep 0.5

# gen_repo DIR FORWARDS SET_ELEMENTS: FORWARDS-2 filler forwards (ports 10000…), then the two
# measured forwards last: iperf (30001 -> 5201) and conn (30002 -> 6000).
gen_repo() {
    mkdir -p "$1"
    python3 - "$1" "$2" "$3" <<'EOF'
import sys
d, n, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = ["fwc 1"]
if s:
    out.append('set "big" {')
    out += [f'    - "198.19.{i // 256}.{i % 256}"' for i in range(s)]
    out.append("}")
    out.append('input {\n    deny "bigset" from="@big"\n}')
for i in range(n - 2):
    out.append(f'forward "f{i:05d}" listen=":{10000 + i}" to="198.18.2.2:6000"')
out.append('forward "zz-iperf" listen=":30001" to="198.18.2.2:5201"')
out.append('forward "zz-conn" listen=":30002" to="198.18.2.2:6000"')
open(f"{d}/fwc.kdl", "w").write("\n".join(out) + "\n")
EOF
}

# naive DIR FORWARDS: one rule per forward in an ip nat prerouting chain, measured ones last.
gen_naive() {
    python3 - "$1" "$2" <<'EOF'
import sys
f, n = sys.argv[1], int(sys.argv[2])
out = ["table ip naive {", "  chain pre {", "    type nat hook prerouting priority -100;"]
out += [f"    tcp dport {10000 + i} dnat to 198.18.2.2:6000" for i in range(n - 2)]
out += ["    tcp dport 30001 dnat to 198.18.2.2:5201", "    tcp dport 30002 dnat to 198.18.2.2:6000", "  }",
        "  chain post {", "    type nat hook postrouting priority 100;", "    ct status dnat masquerade", "  }", "}"]
open(f, "w").write("\n".join(out) + "\n")
EOF
}

ms() { python3 -c "import time; print(int(time.time()*1000))"; }

apply_json() { # repo state -> one line of JSON with the phases
    "$FWC" apply "$1" --state-dir "$2" --netns $H --auto-approve --json 2>/dev/null \
      | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(json.dumps({k: r[k] for k in ["prepare_ms","commit_ms","verify_ms","total_ms"]}))'
}

results="$WORK/results.jsonl"
: > "$results"

echo "== apply time" >&2
for n in 1000 10000; do
    gen_repo "$WORK/r$n" $n 10000
    gen_repo "$WORK/r${n}b" $((n + 1)) 10000   # the same plus one forward
    st="$WORK/state$n"
    ip netns exec $H nft delete table inet fwc 2>/dev/null || true
    first=$(apply_json "$WORK/r$n" "$st")
    change=$(apply_json "$WORK/r${n}b" "$st")
    # The bare transaction: delete + re-create the table, as fwc's commit sends it.
    gen=$(python3 -c "import json; print(json.load(open('$st/state.json'))['current'])")
    python3 - "$st/$gen/nftables.json" "$WORK/tx.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
t = {"family": "inet", "name": "fwc"}
json.dump({"nftables": [{"add": {"table": t}}, {"delete": {"table": t}}] + doc["nftables"]}, open(sys.argv[2], "w"))
EOF
    t0=$(ms); ip netns exec $H nft -j -f "$WORK/tx.json"; t1=$(ms)
    t2=$(ms); ip netns exec $H nft -j -c -f "$WORK/tx.json"; t3=$(ms)
    rules=$(ip netns exec $H nft -j list table inet fwc | python3 -c 'import json,sys; d=json.load(sys.stdin)["nftables"]; print(sum(1 for o in d if "rule" in o))')
    echo "{\"kind\":\"apply\",\"forwards\":$n,\"set_elements\":10000,\"first\":$first,\"change\":$change,\"nft_f_ms\":$((t1 - t0)),\"nft_c_ms\":$((t3 - t2)),\"nft_rules\":$rules,\"tx_bytes\":$(stat -c %s "$WORK/tx.json")}" | tee -a "$results" >&2
done

one() { # -> "gbit conn_per_sec"
    local b c
    b=$(ip netns exec $C iperf3 -c 198.18.1.1 -p 30001 -t 5 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
    c=$(ip netns exec $C "$CR" connect 198.18.1.1:30002 5 2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["per_sec"])')
    ip netns exec $H conntrack -F >/dev/null 2>&1 || true
    sleep 1
    echo "$b $c"
}

load_fwc() {
    ip netns exec $H nft delete table ip naive 2>/dev/null || true
    rm -rf "$WORK/tstate"
    "$FWC" apply "$WORK/t$1" --state-dir "$WORK/tstate" --netns $H --auto-approve >/dev/null
}

load_naive() {
    ip netns exec $H nft delete table inet fwc 2>/dev/null || true
    ip netns exec $H nft -f "$WORK/naive$1.nft"
}

report() { # label "b c" lines...
    local label=$1; shift
    python3 -c '
import json, statistics, sys
label, reps, runs = sys.argv[1], int(sys.argv[2]), [tuple(map(float, r.split())) for r in sys.argv[3:]]
b = [r[0] for r in runs]; c = [r[1] for r in runs]
print(json.dumps({"kind": "traffic", "label": label, "runs": reps,
    "gbit_per_sec": round(statistics.median(b), 2), "gbit_min": round(min(b), 2), "gbit_max": round(max(b), 2),
    "new_conn_per_sec": round(statistics.median(c)), "conn_min": round(min(c)), "conn_max": round(max(c))}))
' "$label" "$REPS" "$@"
}

echo "== traffic (fwc and naive alternate, $REPS runs each)" >&2
for n in 10 10000; do
    gen_repo "$WORK/t$n" $n 0
    gen_naive "$WORK/naive$n.nft" $n
    fr=() nr=()
    for _ in $(seq "$REPS"); do
        load_fwc $n;   fr+=("$(one)")
        load_naive $n; nr+=("$(one)")
    done
    report "fwc, $n forwards" "${fr[@]}" | tee -a "$results" >&2
    report "naive, $n forwards" "${nr[@]}" | tee -a "$results" >&2
    ip netns exec $H nft delete table ip naive 2>/dev/null || true
done

cp "$results" "$HERE/results.json"
python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| apply | forwards | set elements | nft rules | first apply (prepare / commit / verify / total ms) | +1 forward (total ms) | bare `nft -j -f` ms | `nft -j -c -f` ms |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "apply":
        f = r["first"]
        print(f"| | {r['forwards']} | {r['set_elements']} | {r['nft_rules']} | {f['prepare_ms']} / {f['commit_ms']} / {f['verify_ms']} / {f['total_ms']} | {r['change']['total_ms']} | {r['nft_f_ms']} | {r['nft_c_ms']} |")
print()
print("| ruleset | throughput Gbit/s: median (min-max) | new connections/s: median (min-max) |")
print("|---|---|---|")
for r in rows:
    if r["kind"] == "traffic":
        print(f"| {r['label']} | {r['gbit_per_sec']} ({r['gbit_min']}-{r['gbit_max']}) | {r['new_conn_per_sec']} ({r['conn_min']}-{r['conn_max']}) |")
EOF
