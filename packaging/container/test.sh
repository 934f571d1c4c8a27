#!/usr/bin/env bash
# Build the agent image with podman and run it: `fwc --version`, `fwc check` on
# examples/quickstart, and the man pages present. Needs root, podman and (the first time, to
# make the base image without a registry) debootstrap and Debian's apt mirror.
#   FWC=path/to/fwc   the binary to put in the image (default: target/release/fwc, else
#                     target/debug/fwc; build it first). It must run on Debian bookworm.
# The base image docker.io/library/debian:bookworm-slim is used if podman has it; otherwise a
# minimal bookworm made by debootstrap is imported under that name (cached in
# ${FWC_ROOTFS_CACHE:-/var/cache/fwc/bookworm-rootfs.tar}). By default the Containerfile's
# build stage is not used: the binary comes in through FWC_BUILD.
#   FWC_CONTAINER_BUILD=1  build fwc in the build stage instead (Debian's cargo-web on the same
#                     base, crates from crates.io; the host's CA bundle is mounted for cargo, for
#                     a TLS-intercepting proxy): a release build, about 25 min on 2 busy cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
FWC="${FWC:-}"
IN_CONTAINER="${FWC_CONTAINER_BUILD:-}"
if [ -z "$IN_CONTAINER" ]; then
  if [ -z "$FWC" ]; then
    for c in target/release/fwc target/debug/fwc; do [ -x "$c" ] && { FWC=$c; break; }; done
  fi
  [ -x "${FWC:-}" ] || { echo "container test: no fwc binary (build it, or set FWC=)" >&2; exit 1; }
fi
command -v podman >/dev/null || { echo "container test: podman is not installed (apt-get install podman)" >&2; exit 1; }
BASE=docker.io/library/debian:bookworm-slim
# Unique tags: another run (CI, a second checkout) may use podman at the same time.
run_id="t$$-$RANDOM"
TAG=localhost/fwc-agent:$run_id
BIN_IMAGE=localhost/fwc-prebuilt:$run_id
work=$(mktemp -d /tmp/fwc-t-container.XXXXXX)
# FWC_KEEP_IMAGE=1 keeps $TAG for a look after the run (its name is printed).
trap 'rm -rf "$work"; podman rmi -f "$BIN_IMAGE" >/dev/null 2>&1; [ -n "${FWC_KEEP_IMAGE:-}" ] || podman rmi -f "$TAG" >/dev/null 2>&1 || true' EXIT

# 1. The base image, made locally when no registry is reachable.
if ! podman image exists "$BASE"; then
  cache="${FWC_ROOTFS_CACHE:-/var/cache/fwc/bookworm-rootfs.tar}"
  if [ ! -s "$cache" ]; then
    command -v debootstrap >/dev/null || { echo "container test: debootstrap is not installed" >&2; exit 1; }
    mkdir -p "$(dirname "$cache")"
    debootstrap --variant=minbase bookworm "$work/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 \
      || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    # The image's apt uses the same mirror, security updates too.
    tar -C "$work/rootfs" -cf "$cache.tmp" . && mv "$cache.tmp" "$cache"
    rm -rf "$work/rootfs"
  fi
  podman import --change 'CMD ["/bin/bash"]' "$cache" "$BASE" >/dev/null
fi

# 2. An image holding the binary and the man pages where the build stage would leave them
# (or, with FWC_CONTAINER_BUILD=1, the build stage itself).
build_args=(--build-arg FWC_BUILD="$BIN_IMAGE")
if [ -n "$IN_CONTAINER" ]; then
  ca=/etc/ssl/certs/ca-certificates.crt
  # buildah skips stages it sees no reference to, and it does not expand FROM ${FWC_BUILD}.
  build_args=(--skip-unused-stages=false -v "$ca:/run/build-ca.crt:ro" --build-arg CARGO_HTTP_CAINFO=/run/build-ca.crt)
else
  mkdir -p "$work/bin/src/target/release" "$work/bin/out/man"
  cp "$FWC" "$work/bin/src/target/release/fwc"
  "$FWC" man --out "$work/bin/out/man" >/dev/null
  tar -C "$work/bin" -cf "$work/bin.tar" .
  podman import "$work/bin.tar" "$BIN_IMAGE" >/dev/null
fi

# 3. The runtime stage of the real Containerfile (apt inside needs the mirror: host network).
podman build --isolation chroot --network host "${build_args[@]}" -f packaging/container/Containerfile -t "$TAG" . >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; exit 1; }

# 4. What the image does. In a sandbox (this project's CI: hybrid cgroups, no CAP_SYS_RESOURCE)
# podman's defaults fail: crun refuses hybrid cgroups and both runtimes fail to set podman's
# default rlimits, so runc (if installed) with small explicit rlimits.
runtime=(); command -v runc >/dev/null && runtime=(--runtime runc)
run=(podman "${runtime[@]}" run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
version=$("${run[@]}" "$TAG" --version)
echo "container: $version"
[[ "$version" == fwc* ]] || { echo "container test: unexpected --version output: $version" >&2; exit 1; }
"${run[@]}" -v "$PWD/examples/quickstart:/repo:ro" "$TAG" check /repo
"${run[@]}" --entrypoint /bin/sh "$TAG" -c 'command -v nft ssh-keygen gpg >/dev/null && test -s /usr/share/man/man1/fwc-agent.1 && test -s /usr/share/doc/fwc/LICENSE'
# A broken rule file is refused with its position (exit 1, nothing else needed).
mkdir -p "$work/bad" && printf 'fwc 1\ninput {\n    allow "web" proto=tcp port=80,443\n}\n' >"$work/bad/fwc.kdl"
if out=$("${run[@]}" -v "$work/bad:/repo:ro" "$TAG" check /repo 2>&1); then
  echo "container test: a bad rule file passed check" >&2; exit 1
fi
grep -q 'fwc.kdl:3:32' <<<"$out" || { echo "container test: no position in: $out" >&2; exit 1; }
# 5. The DaemonSet's pod: its container's capabilities and mounts, the agent in a scratch namespace.
[ -n "${FWC_SKIP_POD:-}" ] || packaging/container/pod-test.sh "$TAG" "${runtime[@]}"
[ -z "${FWC_KEEP_IMAGE:-}" ] || echo "container: kept image $TAG"
echo "container test: ok"
