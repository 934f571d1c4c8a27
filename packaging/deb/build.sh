#!/usr/bin/env bash
# Build the Debian package of fwc with cargo-deb (`cargo install cargo-deb`):
#   packaging/deb/build.sh                 # release build, then target/debian/fwc_<version>_<arch>.deb
#   PROFILE=dev packaging/deb/build.sh     # package the debug binary (tests; faster, same contents)
#   NO_BUILD=1 …                           # the binary of that profile is already built
# It generates the man pages (`fwc man`) and shell completions (`fwc completions`) the
# [package.metadata.deb] assets of runtime/Cargo.toml name, compressed as Debian wants them.
# Extra arguments go to `cargo deb` (e.g. --output DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=${PROFILE:-release}
command -v cargo-deb >/dev/null || { echo "build.sh: cargo-deb is not installed: cargo install cargo-deb" >&2; exit 1; }
[ -n "${NO_BUILD:-}" ] || cargo build --profile "$profile" -p fwc-runtime --bin fwc
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
fwc=target/$dir/fwc
assets=packaging/deb/generated
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$fwc" man --out "$assets/man" >/dev/null
gzip -9n "$assets"/man/*.1
"$fwc" completions bash >"$assets/completions/fwc"
"$fwc" completions zsh >"$assets/completions/_fwc"
"$fwc" completions fish >"$assets/completions/fwc.fish"
cargo deb -p fwc-runtime --no-build --profile "$profile" "$@"
