#!/usr/bin/env bash
# Builds what we ship, for x86_64 and aarch64, into TARGET_DIR/dist (TARGET_DIR: wherever cargo
# builds; `--print-dir` prints the folder and builds nothing):
#
#   x86_64/gpuslack, aarch64/gpuslack                  the binaries, linked against glibc 2.28
#   gpuslack-VERSION-py3-none-manylinux_2_28_ARCH.whl  `pip install` (scripts/dist/wheel.py)
#   gpuslack_VERSION_{amd64,arm64}.deb                 `dpkg -i` (scripts/dist/deb.sh)
#   image/{amd64,arm64}/gpuslack                       the container build's context
#                                                      (deploy/container/build.sh)
#
# Each binary is one `cargo zigbuild --release --target ARCH-unknown-linux-gnu.2.28`: zig links
# it against glibc 2.28's symbol versions (RHEL 8, Ubuntu 20.04, Debian 10 and everything
# since), whatever the build host's glibc is; tests/dist.rs checks that nothing above
# GLIBC_2.28 is asked for. A plain `cargo build` links against the build host's glibc instead
# (build.rs says so in a warning). GPUSLACK_DIST_ARCHS="x86_64" builds one architecture.
#
# Installs what it needs, idempotently: ziglang and cargo-zigbuild (pinned, from PyPI) into
# TARGET_DIR/dist-venv, and Rust's aarch64 standard library and llvm-tools with rustup.
set -euo pipefail
cd "$(dirname "$0")/../.."

target_dir=$(cargo metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
dist=$target_dir/dist
if [ "${1:-}" = --print-dir ]; then
  echo "$dist"
  exit 0
fi
archs=${GPUSLACK_DIST_ARCHS:-x86_64 aarch64}
venv=$target_dir/dist-venv
zig_version=0.17.1
zigbuild_version=0.24.1
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('ziglang') != '$zig_version' or m.version('cargo-zigbuild') != '$zigbuild_version')" 2>/dev/null; then
  python=$(command -v python3.11 || command -v python3)
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "ziglang==$zig_version" "cargo-zigbuild==$zigbuild_version"
fi
for arch in $archs; do
  if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$arch-unknown-linux-gnu"; then
    rustup target add "$arch-unknown-linux-gnu"
  fi
done

# llvm-objcopy, which strips both architectures' binaries (binutils' handles only its own).
objcopy=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-objcopy
if [ ! -x "$objcopy" ]; then
  rustup component add llvm-tools
fi

version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
summary=$(sed -n '/^\[package\]/,/^\[/s/^description = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
# The commit's time in every archive, so that the same binary packs to the same bytes; given to
# the packing steps only (a build script that follows SOURCE_DATE_EPOCH would rebuild at every
# commit).
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
mkdir -p "$dist"
for arch in $archs; do
  case "$arch" in
    x86_64) deb_arch=amd64 ;;
    aarch64) deb_arch=arm64 ;;
    *) echo "scripts/dist/build.sh: no such architecture: $arch (x86_64, aarch64)" >&2; exit 2 ;;
  esac
  PATH="$venv/bin:$PATH" cargo zigbuild --release --locked --bin gpuslack \
    --target "$arch-unknown-linux-gnu.2.28"
  # No debug information in what we ship (69 MiB → 12), the symbol table kept (backtraces name
  # functions; tests/dist.rs reads the code's order from it). Not at link time: zig's driver
  # takes rustc's --strip-debug for a full strip.
  mkdir -p "$dist/$arch"
  "$objcopy" --strip-debug "$target_dir/$arch-unknown-linux-gnu/release/gpuslack" "$dist/$arch/gpuslack.tmp"
  chmod 0755 "$dist/$arch/gpuslack.tmp"
  mv -f "$dist/$arch/gpuslack.tmp" "$dist/$arch/gpuslack"
  SOURCE_DATE_EPOCH=$epoch "$venv/bin/python" scripts/dist/wheel.py "$dist/$arch/gpuslack" "$arch" "$version" "$summary" "$dist"
  SOURCE_DATE_EPOCH=$epoch scripts/dist/deb.sh "$dist/$arch/gpuslack" "$deb_arch" "$version" "$dist"
  mkdir -p "$dist/image/$deb_arch"
  ln -f "$dist/$arch/gpuslack" "$dist/image/$deb_arch/gpuslack"
done
