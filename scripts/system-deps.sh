#!/usr/bin/env bash
# scripts/system-deps.sh — Debian packages the test suite uses: a PostgreSQL server (the pool's
# scale-out backend; tests start a throwaway cluster of their own on loopback) and bubblewrap (the
# local sandbox's isolation: read-only root, no network but the gateway), docker.io and debootstrap
# (the docker sandbox: an engine scripts/docker-engine.sh starts, images `forge sandbox build` makes),
# libseccomp2 (the sandboxes' seccomp filter) and e2fsprogs (mkfs.ext4: the disk limit's file system).
# Installs only what is missing, and only as root with apt-get; otherwise says what to install.
set -euo pipefail
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)  # the local sandbox's isolation
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)  # the docker sandbox's engine (scripts/docker-engine.sh)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)  # its offline base image (forge sandbox build)
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)  # the sandboxes' seccomp filter (pyseccomp)
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)  # the disk limit's file system
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[system-deps] apt-get install ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "[system-deps] missing: ${need[*]} (install them with your package manager; the tests that need them will fail or skip)" >&2
fi
