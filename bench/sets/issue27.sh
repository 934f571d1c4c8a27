#!/usr/bin/env bash
# Million-entry blocklists (docs/performance.md "Sets"): the hash-set layout
# (one plain hash set per prefix length, masked lookups) against the interval set fwc emitted
# before, side by side on one machine, in scratch namespaces (fwc-t-*).
#
#   sudo bash bench/sets/issue27.sh [N]        (default 993000: ~894k /32 + ~99k /24)
#
# FWC (default target/release/fwc) is the build under test; OLD (default
# /work/main/target/debug/fwc, or any build before the hash-set layout) only compiles the same
# repository to get the interval-set nftables.json. REPEATS (default 3) repetitions, medians
# (min-max) in seconds:
#   bare interval / bare hash   `nft -j -f` of each nftables.json into an empty namespace
#   first apply                 `fwc apply` onto an empty namespace (engine: --json total_ms)
#   +1 / -1 element             `fwc apply` of the set file with one /32 more, then back;
#                               from artifact dirs, then from the repositories (compiled in
#                               the same process, as the agent's reconcile does)
#   drift                       `fwc plan` after `nft delete element` of one /32 behind fwc's
#                               back (checked: the plan names it), then `fwc status` (checked:
#                               it names it too)
#   kernel dump                 the kernel's own dump of the /32 set over netlink
#                               (setelem_dump.py: no nft, no JSON): the floor of any complete
#                               drift check of that set
#   other add (hash/interval)   `nft add element` into another table's small interval set
#                               while fwc's set is loaded; the interval column once (it is
#                               ~75 s at 1M)
#   dynamic add                 a CIDR ban into fwc's dynamic set (`banned_v4`)
#   UDP flood                   iperf3 -u, 64-byte datagrams for 5 s from a client namespace
#                               through `deny from=@big` (input hook): packets/s received, and
#                               iperf3's CPU of the receiving host, per layout, interleaved;
#                               also with the blocklist rule(s) repeated 1000 times, so the
#                               lookups dominate the per-packet cost
set -euo pipefail
cd "$(dirname "$0")/../.."
FWC=${FWC:-target/release/fwc}
OLD=${OLD:-/work/main/target/debug/fwc}
REPEATS=${REPEATS:-3}
N=${1:-993000}
[ -x "$FWC" ] || cargo build --release -p fwc-runtime --bin fwc
work=$(mktemp -d /tmp/fwc-bench-27.XXXXXX)
ns="fwc-t-b27-$$"; cl="fwc-t-b27c-$$"
cleanup() { ip netns del "$ns" 2>/dev/null || true; ip netns del "$cl" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f (%.3f-%.3f)", m, a[1], a[NR]}'; }
load() { echo "$(cut -d' ' -f1-3 /proc/loadavg)"; }

# repo DIR MODE: the blocklist (FireHOL style: 90 % /32, 10 % /24, never 198.18.0.0/15, the
# bench's own addresses); MODE base | plus (one /32 more) | minus (the first /32 left out).
repo() {
  python3 - "$N" "$1" "$2" <<'PY'
import os, random, sys
n, d, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
random.seed(27)
os.makedirs(f"{d}/lists", exist_ok=True)
seen, lines = set(), []
while len(lines) < n:
    a = random.randrange(0x01000000, 0xDF000000)
    if a >> 17 == 0xC612 >> 1:
        continue
    if random.random() < 0.1:
        if ("n", a >> 8) in seen: continue
        seen.add(("n", a >> 8)); lines.append("%d.%d.%d.0/24" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255))
    else:
        if a in seen: continue
        seen.add(a); lines.append("%d.%d.%d.%d" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255))
if mode == "plus":
    lines.append("198.51.100.7")
if mode == "minus":
    lines.remove(next(l for l in lines if "/" not in l))
open(f"{d}/lists/big.netset", "w").write("\n".join(lines) + "\n")
open(f"{d}/fwc.kdl", "w").write('fwc 1\nset "big" file="lists/big.netset"\nset "banned" dynamic=#true timeout="1h"\n'
    'input {\n    deny "big" from="@big"\n    deny "banned" from="@banned"\n}\n')
PY
}

fwc_apply() { # DIR STEP
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$("$FWC" apply "$1" --netns "$ns" --state-dir "$work/state" --auto-approve --no-sysctl --json 2>/dev/null)
  t1=$(date +%s.%N)
  echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["report"]["total_ms"] / 1000)' >> "$work/$2.engine"
  echo "$t1 - $t0" | bc >> "$work/$2.wall"
}

echo "machine: $(nproc) cores, $(uname -r), nft $(nft --version | awk '{print $2}'); load before: $(load)"
for v in base plus minus; do repo "$work/repo-$v" "$v"; done
/usr/bin/time -f "%e %M" -o "$work/compile" "$FWC" compile "$work/repo-base" --out "$work/art-base" >/dev/null
echo "compile (new, hash layout): $(cat "$work/compile") (s, peak KiB)"
grep -o '"reason": "named nftables sets[^"]*"' "$work/art-base/manifest.json" | head -1
for v in plus minus; do "$FWC" compile "$work/repo-$v" --out "$work/art-$v" >/dev/null; done
have_old=0
if [ -x "$OLD" ]; then
  "$OLD" compile "$work/repo-base" --out "$work/art-old" >/dev/null && have_old=1
fi

for i in $(seq "$REPEATS"); do
  echo "repetition $i, load $(load)" >&2
  if [ $have_old = 1 ]; then
    ip netns add "$ns"; secs ip netns exec "$ns" nft -j -f "$work/art-old/nftables.json" >> "$work/bare-interval"
    if [ "$i" = 1 ]; then
      ip netns exec "$ns" nft add table inet f2b
      ip netns exec "$ns" nft add set inet f2b s '{ type ipv4_addr; flags interval; }'
      secs ip netns exec "$ns" nft add element inet f2b s '{ 198.51.100.9 }' >> "$work/other-interval"
    fi
    ip netns del "$ns"
  fi
  ip netns add "$ns"; secs ip netns exec "$ns" nft -j -f "$work/art-base/nftables.json" >> "$work/bare-hash"; ip netns del "$ns"
  ip netns add "$ns"; rm -rf "$work/state"
  fwc_apply "$work/art-base" first
  fwc_apply "$work/art-plus" plus
  fwc_apply "$work/art-base" minus-back
  fwc_apply "$work/art-minus" minus
  fwc_apply "$work/art-base" plus-back
  # The same changes applied from the repository (compiled in-process, as the agent does).
  fwc_apply "$work/repo-base" same-repo
  fwc_apply "$work/repo-plus" plus-repo
  fwc_apply "$work/repo-base" minus-repo
  ip netns exec "$ns" nft add table inet f2b
  ip netns exec "$ns" nft add set inet f2b s '{ type ipv4_addr; flags interval; }'
  secs ip netns exec "$ns" nft add element inet f2b s "{ 198.51.100.$i }" >> "$work/other-hash"
  secs ip netns exec "$ns" nft add element inet fwc banned_v4 "{ 203.0.$i.0/24 timeout 1h }" >> "$work/dynamic"
  ip netns exec "$ns" nft delete table inet f2b
  # A /32 of the list that is its own element (not merged into a neighbour or a /24).
  # (big_v4_32, or its shards big_v4_32_s<i> once the set is split: compiler/src/place/setlayout.rs)
  for victim in $(grep -v / "$work/repo-base/lists/big.netset" | sed -n 1000,1100p); do
    for vset in $(ip netns exec "$ns" nft -t list sets inet | awk '$1 == "set" && $2 ~ /^big_v4_32/ {print $2}'); do
      ip netns exec "$ns" nft delete element inet fwc "$vset" "{ $victim }" 2>/dev/null && break 2
    done
  done
  t0=$(date +%s.%N)
  "$FWC" plan "$work/art-base" --netns "$ns" --state-dir "$work/state" > "$work/plan.txt" 2>&1 || true
  t1=$(date +%s.%N); echo "$t1 - $t0" | bc >> "$work/drift"
  grep -q "elements removed: $victim" "$work/plan.txt" || { echo "the plan did not name $victim:"; cat "$work/plan.txt"; exit 1; } >&2
  t0=$(date +%s.%N)
  "$FWC" status --netns "$ns" --state-dir "$work/state" > "$work/status.txt" 2>&1 || true
  t1=$(date +%s.%N); echo "$t1 - $t0" | bc >> "$work/drift-status"
  grep -q "elements removed: $victim" "$work/status.txt" || { echo "fwc status did not name $victim:"; cat "$work/status.txt"; exit 1; } >&2
  secs ip netns exec "$ns" python3 bench/sets/setelem_dump.py fwc "$vset" >> "$work/kernel-dump"
  ip netns del "$ns"
done

# NOTE: iperf3's UDP handshake gets an answer, so its flow is `ct state established` and fwc's
# chains accept it before the blocklist rules: these rows do not measure the set lookups. The
# per-packet cost of the layouts is bench/sets/flood.sh (unanswered datagrams, input + forward).
# UDP flood, interleaved: host namespace with the table loaded by bare nft -j -f, client
# namespace sending from 198.18.0.2 (in no set: every lookup runs, the packet is accepted).
flood() { # NFTABLES_JSON LABEL
  ip netns add "$ns"; ip netns add "$cl"
  ip link add b27h netns "$ns" type veth peer name b27c netns "$cl"
  ip -n "$ns" addr add 198.18.0.1/24 dev b27h; ip -n "$ns" link set b27h up; ip -n "$ns" link set lo up
  ip -n "$cl" addr add 198.18.0.2/24 dev b27c; ip -n "$cl" link set b27c up; ip -n "$cl" link set lo up
  # AMPLIFY: the blocklist rule(s) repeated so the lookups, not the veth and the socket,
  # dominate the per-packet cost (the flood's source is in no set: every copy runs, none
  # matches).
  python3 - "$1" "$AMPLIFY" > "$work/flood.json" <<'PY'
import json, sys
doc, k = json.load(open(sys.argv[1])), int(sys.argv[2])
out = []
for c in doc["nftables"]:
    out.append(c)
    r = c.get("add", {}).get("rule")
    if r and r.get("comment") == "fwc:filter:big":
        out.extend([c] * (k - 1))
json.dump({"nftables": out}, sys.stdout)
PY
  ip netns exec "$ns" nft -j -f "$work/flood.json"
  ip netns exec "$ns" iperf3 -s -1 -D -p 5201 --logfile "$work/iperf-s.log"
  sleep 0.5
  ip netns exec "$cl" iperf3 -c 198.18.0.1 -p 5201 -u -b 0 -l 64 -t 5 --json > "$work/iperf.json" || true
  python3 - "$work/iperf.json" >> "$work/flood-$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["end"]
s = r["sum"]
print("%.0f %.1f" % ((s["packets"] - s["lost_packets"]) / s["seconds"], r["cpu_utilization_percent"]["remote_total"]))
PY
  ip netns del "$cl"; ip netns del "$ns"
}
# FLOOD=0 skips the floods (the apply/drift rows alone).
for AMPLIFY in $([ "${FLOOD:-1}" = 0 ] || echo 1 1000); do
  for i in $(seq "$REPEATS"); do
    flood "$work/art-base/nftables.json" "hash-$AMPLIFY"
    [ $have_old = 1 ] && flood "$work/art-old/nftables.json" "interval-$AMPLIFY"
  done
done

echo
echo "== N=$N ($(grep -c / "$work/repo-base/lists/big.netset") /24, $(grep -vc / "$work/repo-base/lists/big.netset") /32); $REPEATS repetitions, medians (min-max), seconds; load after: $(load)"
echo "| step | hash layout (this build) | interval set (before) |"
echo "|---|---|---|"
[ $have_old = 1 ] && echo "| bare nft -j -f | $(median < "$work/bare-hash") | $(median < "$work/bare-interval") |" || echo "| bare nft -j -f | $(median < "$work/bare-hash") | |"
echo "| fwc apply, first: wall | $(median < "$work/first.wall") | |"
echo "| fwc apply, first: engine | $(median < "$work/first.engine") | |"
echo "| fwc apply +1 element: wall / engine | $(median < "$work/plus.wall") / $(median < "$work/plus.engine") | |"
echo "| fwc apply -1 element: wall / engine | $(median < "$work/minus.wall") / $(median < "$work/minus.engine") | |"
echo "| fwc apply REPO, nothing changed: wall / engine | $(median < "$work/same-repo.wall") / $(median < "$work/same-repo.engine") | |"
echo "| fwc apply REPO +1 element: wall / engine | $(median < "$work/plus-repo.wall") / $(median < "$work/plus-repo.engine") | |"
echo "| fwc apply REPO -1 element: wall / engine | $(median < "$work/minus-repo.wall") / $(median < "$work/minus-repo.engine") | |"
echo "| fwc plan, one element deleted behind fwc's back (named) | $(median < "$work/drift") | |"
echo "| fwc status, the same (named) | $(median < "$work/drift-status") | |"
echo "| kernel's netlink dump of the /32 set alone (floor of a complete check) | $(median < "$work/kernel-dump") | |"
echo "| other program: nft add element into its own interval set | $(median < "$work/other-hash") | $([ -s "$work/other-interval" ] && median < "$work/other-interval") |"
echo "| CIDR ban into fwc's dynamic set | $(median < "$work/dynamic") | |"
for a in $([ "${FLOOD:-1}" = 0 ] || echo 1 1000); do
  echo "| UDP flood, blocklist rule x$a: packets/s received | $(cut -d' ' -f1 "$work/flood-hash-$a" | median) | $([ -s "$work/flood-interval-$a" ] && cut -d' ' -f1 "$work/flood-interval-$a" | median) |"
  echo "| UDP flood, blocklist rule x$a: receiving host CPU % (iperf3) | $(cut -d' ' -f2 "$work/flood-hash-$a" | median) | $([ -s "$work/flood-interval-$a" ] && cut -d' ' -f2 "$work/flood-interval-$a" | median) |"
done
first=$(sort -n "$work/first.wall" | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
if [ $have_old = 1 ]; then
  bi=$(sort -n "$work/bare-interval" | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
  echo "first apply / bare nft -f of the interval set: $(echo "scale=2; $first / $bi" | bc)x"
fi
