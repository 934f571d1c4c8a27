#!/usr/bin/env bash
# Install what fwc needs to build and to run its tests on Debian: nftables, iproute2, clang
# and libbpf headers for the eBPF program, iperf3/socat for dataplane tests, OpenSSL headers
# for git2, sshd (openssh-server) and gnupg for the agent's ssh-transport and signature tests,
# prometheus (promtool and the server) for the metrics tests, lintian and cargo-deb for the
# Debian package test; iptables (iptables-nft) to load Docker's rule layout in the containers test;
# ufw (its ufw-init loads /etc/ufw for `fwc import --from ufw` and the import tests);
# podman, runc and debootstrap for the container image test; tzdata (/usr/share/zoneinfo) for
# schedules' named time zones (tz="Europe/Berlin").
# Needs root (apt-get). Safe to run again.
set -euo pipefail
packages=(nftables iptables ufw iproute2 clang llvm libbpf-dev bpftool iperf3 socat dnsmasq-base pkg-config libssl-dev git openssh-client openssh-server gnupg procps python3 ca-certificates systemd prometheus lintian podman runc debootstrap tzdata)
if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs: ${packages[*]})" >&2
  exit 1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The tests run their own sshd (127.0.0.1, a free port, config and keys in a temp dir) and
  # need only the binary. If this run is what installed openssh-server, do not leave the
  # distribution's sshd enabled on port 22 (in containers policy-rc.d usually kept it from
  # starting anyway). An sshd that was installed before is left alone.
  if [[ " ${missing[*]} " == *" openssh-server "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
  fi
  # Likewise the tests start their own Prometheus (loopback, a free port, a temp dir); the
  # distribution's server on :9090 is not wanted.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
command -v cargo >/dev/null 2>&1 || { echo "setup.sh: Rust (cargo 1.95+) is required: https://rustup.rs" >&2; exit 1; }
# cargo-deb builds the .deb (packaging/deb/build.sh); about 2 min of CPU the first time.
command -v cargo-deb >/dev/null 2>&1 || cargo install --locked cargo-deb
# bpffs for pinned QoS maps
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
echo "setup.sh: ok ($(cargo --version), $(nft --version), $(clang --version | head -1))"
