#!/usr/bin/env bash
# The quickstart, for real, without touching this machine's firewall: builds fwc, creates
# three throwaway network namespaces (client -> fwc host -> backend), applies
# examples/quickstart to the fwc host's namespace, and shows a connection being forwarded,
# one being rejected and one being dropped. Everything is removed on exit.
# FWC=/path/to/fwc uses an existing binary (e.g. the .deb's /usr/bin/fwc) instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "demo.sh: run as root (it creates network namespaces)" >&2; exit 1; }
bash scripts/setup.sh >/dev/null
for d in "$HOME/.cargo/bin" /root/.cargo/bin; do [ -d "$d" ] && PATH="$d:$PATH"; done
if [ -n "${FWC:-}" ]; then
  [ -x "$FWC" ] || { echo "demo.sh: FWC=$FWC is not an executable" >&2; exit 1; }
  echo "==> using $FWC"
else
  echo "==> building fwc (FWC=/path/to/fwc skips this)"
  cargo build -q -p fwc-runtime --bin fwc
  FWC="${CARGO_TARGET_DIR:-$PWD/target}/debug/fwc"
fi

C=fwc-demo-client H=fwc-demo-host B=fwc-demo-backend
STATE=$(mktemp -d /tmp/fwc-demo.XXXXXX)
cleanup() {
  for ns in $C $H $B; do
    for pid in $(ip netns pids $ns 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del $ns 2>/dev/null || true
  done
  rm -rf "$STATE"
}
trap cleanup EXIT
cleanup; STATE=$(mktemp -d /tmp/fwc-demo.XXXXXX)

echo "==> namespaces: $C (198.18.1.2) -> $H (198.18.1.1 | 198.18.2.1) -> $B (198.18.2.2)"
for ns in $C $H $B; do ip netns add $ns; ip -n $ns link set lo up; done
# The host's client side is eth1, the LAN interface the README's example shapes (dev=eth1):
# that example applies as written here too.
ip link add fwcd-c netns $C type veth peer name eth1 netns $H
ip link add fwcd-hb netns $H type veth peer name fwcd-b netns $B
ip -n $C addr add 198.18.1.2/24 dev fwcd-c; ip -n $C link set fwcd-c up
ip -n $H addr add 198.18.1.1/24 dev eth1; ip -n $H link set eth1 up
ip -n $H addr add 198.18.2.1/24 dev fwcd-hb; ip -n $H link set fwcd-hb up
ip -n $B addr add 198.18.2.2/24 dev fwcd-b; ip -n $B link set fwcd-b up
ip -n $C route add default via 198.18.1.1
# The backend has no route back to the client: the forward works only thanks to masquerade.

mkdir -p "$STATE/www" && echo "hello from the backend (198.18.2.2)" > "$STATE/www/index.html"
ip netns exec $B python3 -m http.server 80 --bind 198.18.2.2 --directory "$STATE/www" >/dev/null 2>&1 & disown
sleep 0.5

echo; echo "==> fwc check examples/quickstart"
"$FWC" check examples/quickstart
echo; echo "==> fwc apply examples/quickstart (inside $H)"
"$FWC" apply examples/quickstart --netns $H --state-dir "$STATE/state" --auto-approve
echo; echo "==> fwc status"
"$FWC" status --netns $H --state-dir "$STATE/state"

probe() { # probe HOST PORT: prints how a TCP connect from the client ends
  ip netns exec $C python3 - "$1" "$2" <<'PY'
import socket, sys
s = socket.socket(); s.settimeout(2)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    if sys.argv[2] == "8080":
        s.sendall(b"GET / HTTP/1.0\r\n\r\n"); chunks = []
        while (c := s.recv(4096)): chunks.append(c)
        body = b"".join(chunks).decode(errors="replace")
        print("connected, backend answered:", body.strip().splitlines()[-1])
    else:
        print("connected")
except ConnectionRefusedError: print("refused (TCP reset: a reject rule)")
except socket.timeout: print("no answer (dropped by the input policy)")
PY
}
echo; echo "==> client -> 198.18.1.1:8080 (forward \"web\" to 198.18.2.2:80)"; probe 198.18.1.1 8080
echo "==> client -> 198.18.1.1:113  (reject \"ident\")";                   probe 198.18.1.1 113
echo "==> client -> 198.18.1.1:9999 (nothing allows it; policy drop)";    probe 198.18.1.1 9999
echo; echo "==> the live ruleset: ip netns exec $H nft list table inet fwc (first lines)"
# sed, not head: head would close the pipe early and nft's SIGPIPE would fail the script
# under pipefail (exit 141).
ip netns exec $H nft list table inet fwc | sed -n '1,25p'
echo "..."
cat <<EOF_NEXT

demo done; namespaces removed on exit. What to try next:
  $FWC check examples/quickstart                     # every error with file:line:col and a hint
  $FWC compile examples/quickstart --out /tmp/qs     # the artifacts: nftables.json, qos.json, ...
  $FWC explain examples/quickstart "tcp 198.18.1.2 -> 198.18.1.1:8080"   # which rule decides a flow
  $FWC --help                                         # every command ($FWC man --out DIR writes man pages)
  docs/rules.md (the rule language), docs/operations.md (agent, systemd unit, container image)
EOF_NEXT
