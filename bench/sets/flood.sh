#!/usr/bin/env bash
# Per-packet cost of a million-element blocklist (docs/performance.md "Sets"):
# fwc's hash-set layout (one plain hash set per prefix length, masked lookups) against the same
# elements as one interval set, side by side in one run, with real packets through the input
# and the forward hook.
#
#   sudo bash bench/sets/flood.sh [N]        (default 1000000 elements)
#
# The list (seeded, FireHOL-like): 88 % /32, 9 % /24, 1 % /16-/22, 2 % IPv6 (/128, /64, /48);
# never 198.18.0.0/15 (the bench's own addresses). The repository denies it in `input` and in
# `forward`; FWC (default target/release/fwc) compiles it. The interval variant is the same
# nftables.json with each family's hash sets folded into one `flags interval` set (the
# prefixes as elements) matched by one rule (`ip saddr @big_v4 drop`): what fwc emitted for
# big sets before the hash-set layout. BASE=unsharded compares with the hash sets unsplit
# instead: each length's shards (`big_v4_32_s<i>`) folded into one set `big_v4_32`, and the
# rule per shard (a prefix compare, then the lookup) into one rule per length: the extra step a
# sharded set costs per packet.
#
# Topology per variant, built once and loaded once (bare `nft -j -f` of the artifact):
#   client 198.18.1.2 --veth-- 198.18.1.1 router 198.18.2.1 --veth-- 198.18.2.2 server
# `fwc-udpflood` (bench/src/bin, sendmmsg, 64-byte datagrams, unreplied: conntrack keeps the
# flow `new`, so every packet reaches the blocklist rules; the source is in no set, so every
# lookup runs and misses) sends for SECS (default 5) seconds, pinned to CPU 1:
#   input    to 198.18.1.1 (the router):      delivered = router's Udp InDatagrams+NoPorts
#   forward  to 198.18.2.2 (through the router): delivered = router's Ip ForwDatagrams
# Per run: packets/s delivered, and CPU per delivered packet = (the sender's user+system time,
# which on veth includes the receive path the kernel runs in its softirq, + ksoftirqd's time)
# / packets. AMPLIFY (default "1 100"): the blocklist rules repeated k times, so the lookups
# dominate the per-packet cost at k = 100. REPEATS (default 3) rounds, variants alternating
# within each round; medians (min-max). PROFILE=1: a `perf record -a` of one forward flood
# per variant (top kernel symbols).
set -euo pipefail
cd "$(dirname "$0")/../.."
FWC=${FWC:-target/release/fwc}
FLOOD=${FLOOD:-target/release/fwc-udpflood}
REPEATS=${REPEATS:-3}
SECS=${SECS:-5}
AMPLIFY=${AMPLIFY:-1 100}
BASE=${BASE:-interval}
case "$BASE" in interval) base_label="interval set" ;; unsharded) base_label="unsplit hash sets" ;; *) echo "BASE: interval or unsharded" >&2; exit 2 ;; esac
N=${1:-1000000}
[ -x "$FWC" ] || cargo build --release -p fwc-runtime --bin fwc
[ -x "$FLOOD" ] || cargo build --release -p fwc-bench --bin fwc-udpflood
work=$(mktemp -d /tmp/fwc-bench-flood.XXXXXX)
tag="fl$$"
variants=()
cleanup() {
  for v in "${variants[@]}"; do for r in c r s; do ip netns del "fwc-t-$tag-$v-$r" 2>/dev/null || true; done; done
  rm -rf "$work"
}
trap cleanup EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.0f (%.0f-%.0f)", m, a[1], a[NR]}'; }

python3 - "$N" "$work/repo" <<'PY'
import os, random, sys
n, d = int(sys.argv[1]), sys.argv[2]
random.seed(2705)
os.makedirs(f"{d}/lists", exist_ok=True)
seen, lines = set(), []
def v4():
    while True:
        a = random.randrange(0x01000000, 0xDF000000)
        if a >> 17 != 0xC612 >> 1:
            return a
while len(lines) < n:
    r = random.random()
    if r < 0.02:
        l = random.choice([128, 128, 128, 64, 64, 48])
        a = (0x2a00 << 112) | (random.getrandbits(112) & ~((1 << (128 - l)) - 1) & ((1 << 112) - 1))
        k = ("6", a, l)
        s = ":".join("%x" % ((a >> (16 * (7 - i))) & 0xffff) for i in range(8)) + ("/%d" % l if l < 128 else "")
    else:
        l = 32 if r < 0.90 else 24 if r < 0.99 else random.randint(16, 22)
        a = v4() & ~((1 << (32 - l)) - 1) & 0xffffffff
        k = ("4", a, l)
        s = "%d.%d.%d.%d" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255) + ("/%d" % l if l < 32 else "")
    if k in seen:
        continue
    seen.add(k); lines.append(s)
open(f"{d}/lists/big.netset", "w").write("# synthetic FireHOL-like list\n" + "\n".join(lines) + "\n")
open(f"{d}/fwc.kdl", "w").write('fwc 1\nset "big" file="lists/big.netset"\n'
    'input {\n    deny "big-in" from="@big"\n}\nforward {\n    deny "big-fwd" from="@big"\n}\n')
PY
"$FWC" compile "$work/repo" --out "$work/art" >/dev/null 2>&1
reason=$(python3 -c 'import json,sys; print(next(r["reason"] for r in json.load(open(sys.argv[1]))["rules"] if r["name"] == "big"))' "$work/art/manifest.json")

# The interval variant and the amplified copies (the blocklist rules repeated k times).
python3 - "$work/art/nftables.json" "$work" "$BASE" $AMPLIFY <<'PY'
import copy, json, re, sys
src, work, base, ks = sys.argv[1], sys.argv[2], sys.argv[3], [int(k) for k in sys.argv[4:]]
doc = json.load(open(src))["nftables"]
HASH = re.compile(r"^big_v([46])_(\d+)(?:_s\d+)?$")
SHARD = re.compile(r"^(big_v[46]_\d+)_s\d+$")
def unsharded(doc):
    out, sets, seen = [], {}, set()
    for c in doc:
        s = c.get("add", {}).get("set")
        m = s and SHARD.match(s["name"])
        if m:
            if m.group(1) not in sets:
                sets[m.group(1)] = dict(s, name=m.group(1), elem=[])
                out.append({"add": {"set": sets[m.group(1)]}})
            sets[m.group(1)]["elem"] += s.get("elem", [])
            continue
        r = c.get("add", {}).get("rule")
        if r and any(SHARD.match(str(e.get("match", {}).get("right", ""))[1:]) for e in r["expr"]):
            expr = []
            for e in r["expr"]:
                right = e.get("match", {}).get("right")
                if isinstance(right, dict) and "prefix" in right:
                    continue  # the shard's prefix compare
                if isinstance(right, str) and SHARD.match(right[1:]):
                    e = {"match": dict(e["match"], right="@" + SHARD.match(right[1:]).group(1))}
                expr.append(e)
            r = dict(r, expr=expr)
            key = json.dumps(r, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            c = {"add": {"rule": r}}
        out.append(c)
    return out
def interval(doc):
    out, elems, done, hashed = [], {"4": [], "6": []}, set(), {"4": False, "6": False}
    for c in doc:
        s = c.get("add", {}).get("set")
        m = s and HASH.match(s["name"])
        if m:
            fam, ln = m.group(1), int(m.group(2))
            hashed[fam] = True
            full = 32 if fam == "4" else 128
            elems[fam] += [e if ln == full else {"prefix": {"addr": e, "len": ln}} for e in s.get("elem", [])]
            continue
        out.append(c)
    res, sets = [], {}
    for c in out:
        r = c.get("add", {}).get("rule")
        if r:
            uses = [f for f in "46" if any(isinstance(e, dict) and "match" in e and "big_v%s_" % f in json.dumps(e) for e in r["expr"])]
            if uses:
                fam = uses[0]
                if (r["chain"], fam) in done:
                    continue
                done.add((r["chain"], fam))
                proto = "ip" if fam == "4" else "ip6"
                r = dict(r, expr=[{"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": "saddr"}}, "right": "@big_v" + fam}}] + [e for e in r["expr"] if "match" not in e])
                c = {"add": {"rule": r}}
        if "table" in c.get("add", {}) and not sets:
            res.append(c)
            for fam in "46":
                if not hashed[fam]:
                    continue  # this family was an interval set already: kept as it is
                body = {"family": "inet", "table": c["add"]["table"]["name"], "name": "big_v" + fam,
                        "type": "ipv4_addr" if fam == "4" else "ipv6_addr", "flags": ["interval"]}
                if elems[fam]:
                    body["elem"] = elems[fam]
                sets[fam] = {"add": {"set": body}}
                res.append(sets[fam])
            continue
        res.append(c)
    return res
def amplify(doc, k):
    out = []
    for c in doc:
        out.append(c)
        r = c.get("add", {}).get("rule")
        if r and r.get("comment", "").startswith("fwc:filter:big-"):
            out.extend([c] * (k - 1))
    return out
for name, d in (("hash", doc), ("interval", interval(doc) if base == "interval" else unsharded(doc))):
    for k in ks:
        json.dump({"nftables": amplify(d, k)}, open(f"{work}/{name}-x{k}.json", "w"))
PY

topology() { # VARIANT JSON
  local c="fwc-t-$tag-$1-c" r="fwc-t-$tag-$1-r" s="fwc-t-$tag-$1-s"
  variants+=("$1")
  ip netns add "$c"; ip netns add "$r"; ip netns add "$s"
  ip link add "${tag}$1a" netns "$c" type veth peer name "${tag}$1b" netns "$r"
  ip link add "${tag}$1c" netns "$r" type veth peer name "${tag}$1d" netns "$s"
  for n in "$c" "$r" "$s"; do ip -n "$n" link set lo up; done
  ip -n "$c" addr add 198.18.1.2/24 dev "${tag}$1a"; ip -n "$c" link set "${tag}$1a" up
  ip -n "$r" addr add 198.18.1.1/24 dev "${tag}$1b"; ip -n "$r" link set "${tag}$1b" up
  ip -n "$r" addr add 198.18.2.1/24 dev "${tag}$1c"; ip -n "$r" link set "${tag}$1c" up
  ip -n "$s" addr add 198.18.2.2/24 dev "${tag}$1d"; ip -n "$s" link set "${tag}$1d" up
  ip -n "$c" route add default via 198.18.1.1
  ip -n "$s" route add default via 198.18.2.1
  ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1
  local t0 t1; t0=$(date +%s.%N)
  ip netns exec "$r" nft -j -f "$2"
  t1=$(date +%s.%N)
  echo "loaded $1 ($(basename "$2")) in $(echo "$t1 - $t0" | bc) s; its blocklist rules (input, forward):" >&2
  # (from the file: listing a chain next to a 1M interval set makes nft 1.0.6 dump the set)
  python3 - "$2" >&2 <<'PY'
import json, sys
seen = set()
for c in json.load(open(sys.argv[1]))["nftables"]:
    r = c.get("add", {}).get("rule")
    if r and r.get("comment", "").startswith("fwc:filter:big-") and json.dumps(r) not in seen:
        seen.add(json.dumps(r))
        print("    %s: %s" % (r["chain"], json.dumps([e for e in r["expr"] if "match" in e])))
PY
  # Warm the neighbour entries so the first packets are not queued behind ARP.
  ip netns exec "$c" "$FLOOD" 198.18.2.2:9 0.3 >/dev/null
  ip netns exec "$c" "$FLOOD" 198.18.1.1:9 0.3 >/dev/null
}
snmp() { # NS FIELD-GROUP FIELD
  ip netns exec "$1" awk -v g="$2:" -v f="$3" '$1 == g && !h {for (i = 2; i <= NF; i++) n[i] = $i; h = 1; next} $1 == g && h {for (i = 2; i <= NF; i++) if (n[i] == f) print $i}' /proc/net/snmp
}
delivered() { # VARIANT HOOK
  local r="fwc-t-$tag-$1-r"
  if [ "$2" = input ]; then echo $(( $(snmp "$r" Udp InDatagrams) + $(snmp "$r" Udp NoPorts) )); else snmp "$r" Ip ForwDatagrams; fi
}
ksoftirqd() { # total user+system clock ticks of every ksoftirqd
  local t=0 p
  for p in $(pgrep -x 'ksoftirqd/[0-9]+' || true); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}
flood() { # VARIANT HOOK LABEL
  local dst=198.18.1.1; [ "$2" = forward ] && dst=198.18.2.2
  local d0 d1 k0 k1 out
  d0=$(delivered "$1" "$2"); k0=$(ksoftirqd)
  out=$(ip netns exec "fwc-t-$tag-$1-c" taskset -c 1 "$FLOOD" "$dst:9" "$SECS")
  d1=$(delivered "$1" "$2"); k1=$(ksoftirqd)
  python3 - "$out" "$((d1 - d0))" "$((k1 - k0))" "$(getconf CLK_TCK)" >> "$work/res-$3" <<'PY'
import json, sys
r, got, kt, hz = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cpu = r["cpu_seconds"] + kt / hz
print("%.0f %.0f %d %d" % (got / r["seconds"], cpu / max(got, 1) * 1e9, r["sent"], got))
PY
}

echo "machine: $(nproc) cores, $(uname -r), nft $(nft --version | awk '{print $2}'); load before: $(load)"
echo "set: $reason"
for k in $AMPLIFY; do
  topology "h$k" "$work/hash-x$k.json"
  topology "i$k" "$work/interval-x$k.json"
done
for i in $(seq "$REPEATS"); do
  echo "round $i, load $(load)" >&2
  for k in $AMPLIFY; do
    for hook in input forward; do
      flood "h$k" "$hook" "hash-$hook-$k"
      flood "i$k" "$hook" "interval-$hook-$k"
    done
  done
done
echo
echo "== N=$N; $REPEATS rounds of ${SECS} s per variant, alternating; medians (min-max); load after: $(load)"
echo "| hook, blocklist rules | hash sets: packets/s | $base_label: packets/s | hash ÷ base | hash sets: CPU ns/packet | $base_label: CPU ns/packet |"
echo "|---|---|---|---|---|---|"
for k in $AMPLIFY; do
  for hook in input forward; do
    h="$work/res-hash-$hook-$k"; iv="$work/res-interval-$hook-$k"
    hp=$(cut -d' ' -f1 "$h" | sort -n | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
    ip_=$(cut -d' ' -f1 "$iv" | sort -n | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
    echo "| $hook, x$k | $(cut -d' ' -f1 "$h" | median) | $(cut -d' ' -f1 "$iv" | median) | $(echo "scale=2; $hp / $ip_" | bc)x | $(cut -d' ' -f2 "$h" | median) | $(cut -d' ' -f2 "$iv" | median) |"
  done
done
echo
echo "raw (packets/s, CPU ns/packet, sent, delivered):"
for f in "$work"/res-*; do echo "$(basename "$f"): $(tr '\n' ';' < "$f")"; done
if [ -n "${PROFILE:-}" ] && command -v perf >/dev/null; then
  k=${AMPLIFY%% *}
  for v in h i; do
    ip netns exec "fwc-t-$tag-$v$k-c" taskset -c 1 "$FLOOD" 198.18.2.2:9 6 >/dev/null &
    sleep 0.5
    perf record -q -C 1 -o "$work/perf-$v.data" -- sleep 4 >/dev/null 2>&1 || true
    wait
    echo
    echo "== perf record -C 1 (the sender's CPU), forward flood, variant $v x$k: symbols over 1 % of the sender's and ksoftirqd's samples"
    perf report -q -i "$work/perf-$v.data" -g none --comms fwc-udpflood,ksoftirqd/1 --sort symbol --percent-limit 1 2>/dev/null > "$work/perf-$v.txt" || true
    sed -n 1,30p "$work/perf-$v.txt" | sed 's/[[:space:]]*$//'
  done
fi
