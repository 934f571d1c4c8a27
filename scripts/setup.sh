#!/usr/bin/env bash
# Install what fwc needs to build and to run its tests on Debian: nftables, iproute2, clang
# and libbpf headers for the eBPF program, iperf3/socat for dataplane tests, OpenSSL headers
# for git2, sshd (openssh-server) and gnupg for the agent's ssh-transport and signature tests,
# prometheus (promtool and the server) for the metrics tests, lintian and cargo-deb for the
# Debian package test; iptables (iptables-nft) to load Docker's rule layout in the containers test;
# ufw (its ufw-init loads /etc/ufw for `fwc import --from ufw` and the import tests);
# podman, runc and debootstrap for the container image test; firewalld (installed so that it
# never starts on this host: `fwc import --from firewalld` runs it in a scratch namespace);
# tzdata (/usr/share/zoneinfo) for schedules' named time zones (tz="Europe/Berlin").
# valgrind (callgrind) for the compiler's instruction-count guard (bench/tests/instructions.rs).
# Needs root (apt-get). Safe to run again.
set -euo pipefail
packages=(valgrind nftables iptables ufw iproute2 clang llvm libbpf-dev bpftool iperf3 socat dnsmasq-base pkg-config libssl-dev git openssh-client openssh-server gnupg procps python3 ca-certificates systemd prometheus lintian podman runc debootstrap tzdata)
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
# firewalld: `fwc import --from firewalld` and its tests run the real firewalld on a copy of a
# configuration in a scratch network namespace with a private D-Bus (dbus-daemon). Installed so
# it NEVER starts on this host (it would firewall the root namespace): a policy-rc.d refuses
# every service start during the install, then the unit is masked and checked to be inactive.
if ! dpkg-query -W -f='${Status}' firewalld 2>/dev/null | grep -q "install ok installed"; then
  echo "setup.sh: installing firewalld (not started)"
  export DEBIAN_FRONTEND=noninteractive
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    guard=1
  fi
  apt-get update -qq
  rc=0
  apt-get install -y -qq --no-install-recommends firewalld dbus >/dev/null || rc=$?
  if [ -n "$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi
  [ "$rc" -eq 0 ] || exit "$rc"
fi
if command -v firewalld >/dev/null 2>&1 || [ -x /usr/sbin/firewalld ]; then
  systemctl mask firewalld.service >/dev/null 2>&1 || true
  if systemctl is-active --quiet firewalld.service 2>/dev/null; then
    systemctl stop firewalld.service >/dev/null 2>&1 || true
  fi
  # Never a firewalld table in this host's namespace.
  if nft list table inet firewalld >/dev/null 2>&1; then
    echo "setup.sh: removing a firewalld table from this host's namespace" >&2
    nft delete table inet firewalld || true
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
