#!/usr/bin/env bash
# Installs what tokend needs to build and test on a fresh Debian machine. Idempotent and quiet
# when everything is present. Sourced by scripts/run-dev and scripts/test.
set -euo pipefail

need=()
# glewlwyd: the second real authorization server of the interoperability tests.
# tinyproxy: the real HTTP proxy of the proxy tests.
# skopeo, docker-registry: the container tools of the docker-credential helper's tests.
# dbus, python3-dbusmock: a private session bus with a recording notification daemon (tokenctl notify).
# prometheus: promtool checks the shipped alerting rules (config/tokend.rules.yml).
# debootstrap, systemd-container: scripts/realhost builds a Debian 12 root and boots it with
# systemd-nspawn (systemd as PID 1, for the real-host scenarios).
for pkg in libsystemd-dev libsqlite3-dev sqlite3 socat util-linux python3 python3-venv systemd postgresql git glewlwyd openssl tinyproxy curl skopeo docker-registry dbus python3-dbusmock prometheus debootstrap systemd-container; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# kubectl for the credential-helper tests: Debian's kubernetes-client, unless the machine
# already has a kubectl (another package owning /usr/bin/kubectl would make it conflict).
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v swift >/dev/null 2>&1; then
  for dir in /opt/swift/usr/bin /usr/share/swift/usr/bin; do
    [ -x "$dir/swift" ] && export PATH="$dir:$PATH" && break
  done
fi
command -v swift >/dev/null 2>&1 || { echo "setup: the Swift 6 toolchain is required (swift not found)" >&2; exit 1; }
swift --version 2>&1 | grep -qE 'Swift version 6\.' || { echo "setup: Swift 6.x is required" >&2; exit 1; }
