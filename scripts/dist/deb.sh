#!/usr/bin/env bash
# Writes the Debian package around a binary the floor build already linked
# (scripts/dist/build.sh), with dpkg-deb from a staging folder: nothing to install beyond dpkg.
#
#   scripts/dist/deb.sh BINARY DEB_ARCH VERSION OUT_DIR      # DEB_ARCH: amd64 or arm64
#
# prints the package's path. What it holds (tests/dist.rs installs it, runs the unit's ExecStart
# against a replayed trace, scrapes /metrics, purges it and checks that nothing is left):
#   /usr/bin/gpuslack
#   /usr/lib/systemd/system/gpuslack.service             deploy/systemd's, with /usr/bin's path
#   /usr/lib/systemd/system/gpuslack-healthcheck.{service,timer}
#   /etc/gpuslack/gpuslack.toml                           the default config (a conffile)
#   /etc/gpuslack/gpuslack.env                            keys and overrides (a conffile, 0640)
#   /usr/share/doc/gpuslack/copyright
# The maintainer scripts enable and start the unit and its health-check timer where systemd
# runs (`/run/systemd/system`), and stop and disable them on removal; elsewhere (a container, a
# chroot) they do nothing. Depends on libc6 >= 2.28, the floor the binary keeps; curl is
# recommended for the health check.
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: deb.sh BINARY DEB_ARCH VERSION OUT_DIR" >&2
  exit 2
fi
binary=$1 arch=$2 version=$3 out=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
case "$arch" in amd64|arm64) ;; *) echo "deb.sh: DEB_ARCH is amd64 or arm64, not $arch" >&2; exit 2 ;; esac
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# mktemp's 0700 would be the mode of the package's root, which dpkg may give to /.
chmod 0755 "$stage"
units=$stage/usr/lib/systemd/system
install -d "$stage/DEBIAN" "$units" "$stage/etc/gpuslack" "$stage/usr/share/doc/gpuslack"
install -D -m 0755 "$binary" "$stage/usr/bin/gpuslack"
for unit in gpuslack.service gpuslack-healthcheck.service gpuslack-healthcheck.timer; do
  sed 's#/usr/local/bin/gpuslack#/usr/bin/gpuslack#g' "$root/deploy/systemd/$unit" > "$units/$unit"
  chmod 0644 "$units/$unit"
done
install -m 0644 "$root/deploy/systemd/gpuslack.toml" "$stage/etc/gpuslack/gpuslack.toml"
install -m 0640 "$root/deploy/systemd/gpuslack.env" "$stage/etc/gpuslack/gpuslack.env"
cat > "$stage/usr/share/doc/gpuslack/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: gpuslack
Source: https://github.com/gpuslack/gpuslack

Files: *
Copyright: the gpuslack authors
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
chmod 0644 "$stage/usr/share/doc/gpuslack/copyright"
printf '/etc/gpuslack/gpuslack.toml\n/etc/gpuslack/gpuslack.env\n' > "$stage/DEBIAN/conffiles"
size_kib=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<EOF
Package: gpuslack
Version: $version
Architecture: $arch
Maintainer: gpuslack <gpuslack@users.noreply.github.com>
Installed-Size: $size_kib
Depends: libc6 (>= 2.28)
Recommends: curl
Section: admin
Priority: optional
Homepage: https://github.com/gpuslack/gpuslack
Description: tells whether a GPU is really working
 NVML and GPM sampling, a verdict per GPU and window (compute or memory
 bound, launch bound, input starved, hung...), exported over OTLP and as
 Prometheus metrics. The gpuslack.service unit runs the agent; its
 /metrics listens on loopback unless /etc/gpuslack/gpuslack.env says
 otherwise. NVML is loaded from the NVIDIA driver at run time.
EOF
cat > "$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl enable gpuslack.service gpuslack-healthcheck.timer >/dev/null
  systemctl restart gpuslack.service gpuslack-healthcheck.timer || true
fi
EOF
cat > "$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl stop gpuslack-healthcheck.timer gpuslack.service || true
  if [ "$1" = remove ]; then
    systemctl disable gpuslack.service gpuslack-healthcheck.timer >/dev/null || true
  fi
fi
EOF
cat > "$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
EOF
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/conffiles"
# The same files give the same package: every time the commit's (or 1980's), owner root.
epoch=${SOURCE_DATE_EPOCH:-315532800}
find "$stage" -exec touch -h -d "@$epoch" {} +
mkdir -p "$out"
deb=$out/gpuslack_${version}_${arch}.deb
SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
