#!/usr/bin/env bash
# Push-to-applied latency of `fwc agent` (docs/performance.md, "## Agent").
#
# A bare repo on file://, an fwc host network namespace, the agent applying into it. For each
# round a commit that changes one rule is pushed; the time until the agent's audit log has the
# `apply` entry of that commit (the rules are live and verified by then) is measured, once
# poked by the webhook right after the push, once by polling alone.
#
# usage: sudo bench/agent/latency.sh [ROUNDS=10] [INTERVAL=2s]   (needs root, nft, ip, git)
set -euo pipefail
ROUNDS=${1:-10}
INTERVAL=${2:-2s}
FWC=${FWC:-$(dirname "$0")/../../target/release/fwc}
[ -x "$FWC" ] || { echo "build first: cargo build --release -p fwc-runtime (or set FWC=)"; exit 1; }
T=$(mktemp -d)
NS=fwc-bench-agent-$$
PORT=$((20000 + $$ % 20000))
cleanup() { [ -n "${AGENT:-}" ] && kill "$AGENT" 2>/dev/null; wait 2>/dev/null; ip netns del "$NS" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
ip netns add "$NS"; ip -n "$NS" link set lo up
git init -q --bare "$T/rules.git"; git init -q -b main "$T/w"
g() { git -C "$T/w" -c user.name=bench -c user.email=b@example.com -c commit.gpgsign=false "$@"; }
rules() { printf 'fwc 1\ninput policy=drop {\n    allow "r%s" proto=tcp port=%s\n}\n' "$1" "$1" > "$T/w/fwc.kdl"; }
rules 1000; g add fwc.kdl; g commit -qm r1000; g push -q "$T/rules.git" HEAD:main
echo -n hunter2 > "$T/secret"
"$FWC" agent --repo "file://$T/rules.git" --host localhost --interval "$INTERVAL" --state-dir "$T/state" \
  --metrics "127.0.0.1:$PORT" --webhook-secret-file "$T/secret" --netns "$NS" 2>"$T/agent.log" &
AGENT=$!
now() { date +%s.%N; }
wait_applied() { # commit -> seconds waited
  local t0=$1 c=$2
  for _ in $(seq 1 2000); do
    grep -q "\"action\":\"apply\".*\"commit\":\"$c\"\|\"commit\":\"$c\".*\"action\":\"apply\"" "$T/state/audit.jsonl" 2>/dev/null && { echo "$(now) - $t0" | bc; return; }
    sleep 0.01
  done
  echo "timeout"; return 1
}
sleep 3
hook() {
  local body='{"ref":"refs/heads/main"}'
  local sig; sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac hunter2 -r | cut -d' ' -f1)
  curl -s -o /dev/null -X POST -H "X-Hub-Signature-256: sha256=$sig" --data "$body" "http://127.0.0.1:$PORT/hooks/git"
}
run() { # mode
  local mode=$1 out=()
  for i in $(seq 1 "$ROUNDS"); do
    local p=$((1000 + RANDOM % 30000))
    rules "$p"; g commit -qam "r$p"
    local t0; t0=$(now)
    g push -q "$T/rules.git" HEAD:main
    [ "$mode" = webhook ] && hook
    out+=("$(wait_applied "$t0" "$(g rev-parse HEAD)")")
    sleep 0.$((RANDOM % 10))
  done
  printf '%s\n' "${out[@]}" | sort -n | awk -v m="$mode" '{a[NR]=$1} END {printf "%-8s n=%d  min %.3fs  median %.3fs  p90 %.3fs  max %.3fs\n", m, NR, a[1], a[int((NR+1)/2)], a[int(NR*0.9+0.5)], a[NR]}'
}
echo "fwc agent push-to-applied latency, interval $INTERVAL, $ROUNDS rounds each ($(nproc) cores, $(uname -r))"
run webhook
run polling
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^fwc_apply_duration_seconds_(sum|count)'
