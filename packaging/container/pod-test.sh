#!/usr/bin/env bash
# Run the agent image the way fwc-agent-daemonset.yaml's pod runs it, as closely as podman
# allows without a kubelet: the container's capabilities (--cap-drop ALL --cap-add, read from
# the manifest), the "node's" network namespace (a scratch one made here, never the host's),
# the bpffs hostPath (a fresh bpffs mounted here), the state dir on the "node", the signers
# file, and `fwc agent --once` with the manifest's flags on a signed commit of a local repo.
# Then from outside: the nft table is in that namespace, the QoS pins are in that bpffs, the
# program is attached, and /proc/sys: refused clearly without the init container, set by it.
#   pod-test.sh IMAGE [FWC-RUNTIME-ARGS...]   (called by test.sh; needs root, ip, bpftool, git)
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=$1; shift
runtime=("$@")
MANIFEST=packaging/container/fwc-agent-daemonset.yaml
id="$$-$RANDOM"
NS="fwc-t-pod-$id"
CT="fwc-t-pod-$id"
work=$(mktemp -d /tmp/fwc-t-pod.XXXXXX)
bpffs="$work/bpffs"
cleanup() {
  podman rm -f "$CT" "$CT-init" >/dev/null 2>&1 || true
  ip netns del "$NS" 2>/dev/null || true
  mountpoint -q "$bpffs" && umount "$bpffs"
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "pod test: $*" >&2; exit 1; }

# 1. What the manifest asks for (one list of capabilities, the init container's command).
caps=$(grep -o 'capabilities: {add: \[[^]]*\]' "$MANIFEST" | sed 's/.*\[//; s/\]//; s/ //g')
[ "$(grep -c 'capabilities:' "$MANIFEST")" = 1 ] && [ -n "$caps" ] || fail "cannot read the container's capabilities from $MANIFEST"
grep -q 'drop: \[ALL\]' "$MANIFEST" || fail "$MANIFEST does not drop ALL capabilities"
init_cmd=$(sed -n 's/^ *command: \[sh, -c, "\(.*\)"\]$/\1/p' "$MANIFEST")
[ -n "$init_cmd" ] || fail "cannot read the init container's command from $MANIFEST"
args=$(tr -d '\n' <"$MANIFEST" | grep -o 'args: \[agent,[^]]*\]') || fail "no agent args in $MANIFEST"
for f in --host --state-dir /var/lib/fwc --allowed-signers /etc/fwc/signers/allowed_signers; do
  grep -q -- "$f" <<<"$args" || fail "the manifest's agent args lost $f: $args"
done
echo "pod: capabilities $caps"

# 2. The "node": a scratch namespace with a veth pair, ip_forward off; a fresh bpffs.
ip netns add "$NS"
ip -n "$NS" link add fwcp0 type veth peer name fwcp1
ip -n "$NS" addr add 198.18.0.1/24 dev fwcp0
ip -n "$NS" addr add 198.18.1.1/24 dev fwcp1
for l in lo fwcp0 fwcp1; do ip -n "$NS" link set "$l" up; done
ip netns exec "$NS" sh -c 'echo 0 >/proc/sys/net/ipv4/ip_forward'
mkdir -p "$bpffs" "$work/state" "$work/signers"
mount -t bpf bpf "$bpffs"

# 3. A rule repository with a signed commit: a filter rule, a kernel forward (needs
# ip_forward), a QoS class on the namespace's veth.
ssh-keygen -q -t ed25519 -N '' -C alice -f "$work/alice"
echo "alice@example.com namespaces=\"git\" $(cat "$work/alice.pub")" >"$work/signers/allowed_signers"
g() { git -C "$work/src" -c user.name=Alice -c user.email=alice@example.com -c init.defaultBranch=main \
        -c gpg.format=ssh -c user.signingkey="$work/alice" "$@"; }
mkdir "$work/src" && g init -q
cat >"$work/src/fwc.kdl" <<'EOF'
fwc 1
host "node-1" {
    labels role=node
}
input policy=accept {
    deny "no-telnet" proto=tcp port=23
}
forward "web" listen=":8080" to="198.18.1.2:80"
forward "tls" listen=":443" to="198.18.1.2:443" backend="userspace"
shape "guests" from="198.18.1.0/24" rate="20mbit" dev="fwcp0"
EOF
g add fwc.kdl && g commit -q -S -m "pod test"
git init -q --bare "$work/rules.git" && g push -q "$work/rules.git" HEAD:main

# 4. The pod's container: the manifest's capabilities, the namespace, the hostPath volumes
# (bpffs with HostToContainer propagation = rslave), /proc/sys read-only as in any
# unprivileged container.
agent() { agent_with "$caps" "$@"; }
agent_with() {
  local with=$1; shift
  podman "${runtime[@]}" run --rm --name "$CT" --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    --cap-drop ALL --cap-add "$with" --network "ns:/run/netns/$NS" \
    -v "$bpffs:/sys/fs/bpf:rslave" -v "$work/state:/var/lib/fwc" -v "$work/signers:/etc/fwc/signers:ro" \
    -v "$work/rules.git:/rules.git:ro" -e NODE_NAME=node-1 "$IMAGE" \
    agent --once --repo file:///rules.git --host node-1 --state-dir /var/lib/fwc --metrics off \
    --allowed-signers /etc/fwc/signers/allowed_signers "$@"
}

# 4a. Without the init container: ip_forward cannot be written; the agent must say so and
# leave nothing applied.
set +e; out=$(agent 2>&1); rc=$?; set -e
echo "pod: without the init container: exit $rc"
[ "$rc" != 0 ] || fail "the agent succeeded with /proc/sys read-only and ip_forward=0:
$out"
grep -q 'net.ipv4.ip_forward' <<<"$out" || fail "the failure does not name net.ipv4.ip_forward:
$out"
echo "$out" | grep -m1 'ip_forward' | sed 's/^/pod:   /'
if ip netns exec "$NS" nft list table inet fwc >/dev/null 2>&1; then fail "table inet fwc left behind after the refused apply"; fi

# 4b. The init container (privileged, same namespace) sets the sysctls; the agent applies.
podman "${runtime[@]}" run --rm --name "$CT-init" --privileged --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
  --network "ns:/run/netns/$NS" --entrypoint /bin/sh "$IMAGE" -c "$init_cmd"
[ "$(ip netns exec "$NS" cat /proc/sys/net/ipv4/ip_forward)" = 1 ] || fail "the init container did not set ip_forward"
# Each capability is needed: without any one of them the apply fails and nothing is left.
for c in ${caps//,/ }; do
  without=$(tr , '\n' <<<"$caps" | grep -vx "$c" | paste -sd,)
  if out=$(agent_with "$without" 2>&1); then fail "the agent succeeded without CAP_$c:
$out"; fi
  if ip netns exec "$NS" nft list table inet fwc >/dev/null 2>&1; then fail "table inet fwc left behind without CAP_$c"; fi
  echo "pod: without CAP_$c: $(grep -m1 -o 'reason=.*' <<<"$out" | cut -c1-160)"
done
set +e; out=$(agent 2>&1); rc=$?; set -e
[ "$rc" = 0 ] || fail "the agent failed (exit $rc) after the init container:
$out"
echo "pod: after the init container: exit 0"

# 5. From outside the container.
table=$(ip netns exec "$NS" nft list table inet fwc) || fail "no table inet fwc in the namespace"
grep -q 'no-telnet' <<<"$table" || fail "no rule no-telnet in the namespace's table inet fwc"
grep -q 'dnat' <<<"$table" || fail "no dnat for the forward in table inet fwc"
pins=$(cd "$bpffs" && find . -mindepth 1 | sort | tr '\n' ' ')
grep -q 'prog' <<<"$pins" || fail "no QoS program pinned in the bpffs: $pins"
echo "pod: pinned in the bpffs: $pins"
# The program's TCX link (link type 11; bpftool before 7.4 prints only the number), pinned in
# the bpffs, runs the pinned program on the namespace's fwcp0.
link=$(ip netns exec "$NS" bpftool -j link show pinned "$bpffs/fwc/links/fwcp0") || fail "no pinned link for fwcp0"
prog=$(bpftool -j prog show pinned "$bpffs/fwc/prog") || fail "no pinned program"
ifindex=$(ip -n "$NS" -o link show fwcp0 | cut -d: -f1)
python3 - "$link" "$prog" "$ifindex" <<'PY' || fail "the pinned link does not attach the pinned program to fwcp0 (ifindex $ifindex): $link / $prog"
import json, sys
link, prog, ifindex = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
ok = link.get("type") in (11, "tcx") and link.get("prog_id") == prog.get("id") and link.get("ifindex", ifindex) == ifindex
sys.exit(0 if ok else 1)
PY
echo "pod: attached to fwcp0: link $link, program id $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$prog")"
# A restarted pod adopts what runs (nothing to do).
agent >/dev/null 2>&1 || fail "a second run (restarted pod) failed"
echo "pod test: ok"
