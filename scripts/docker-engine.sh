#!/usr/bin/env bash
# scripts/docker-engine.sh — a Docker engine for Forge's `docker` sandbox on a machine without
# systemd (Debian's docker.io: dockerd + containerd + runc), started and stopped by hand.
#
#   scripts/docker-engine.sh start    start dockerd unless one answers; prints `export DOCKER_HOST=...`
#   scripts/docker-engine.sh stop     stop the dockerd this script started (its containers removed first)
#   scripts/docker-engine.sh status   does it answer? (exit 1 if not)
#   scripts/docker-engine.sh env      print the `export DOCKER_HOST=...` line
#
# The engine runs with `--iptables=false --bridge=none`: no docker0, no iptables rules, containers
# get only loopback (Forge's sandboxes use `--network none` anyway). Images are never pulled: build
# them with `forge sandbox build` (debootstrap + docker import, then sandboxes/images/*).
# Packages: scripts/system-deps.sh installs docker.io and debootstrap when missing.
#
# Settings (environment):
#   FORGE_DOCKER_DIR   state: data-root, exec-root, socket, pid file, log (default /tmp/forge-docker)
#   FORGE_DOCKER_SOCK  the engine's socket (default $FORGE_DOCKER_DIR/docker.sock)
set -euo pipefail

DIR=${FORGE_DOCKER_DIR:-/tmp/forge-docker}
SOCK=${FORGE_DOCKER_SOCK:-$DIR/docker.sock}
PIDFILE=$DIR/dockerd.pid
LOG=$DIR/dockerd.log
export DOCKER_HOST="unix://$SOCK"

log() { echo "[docker-engine $(date +%T)] $*" >&2; }
alive() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

do_start() {
  command -v dockerd >/dev/null 2>&1 || { log "dockerd is not installed (run scripts/system-deps.sh as root)"; exit 1; }
  command -v docker >/dev/null 2>&1 || { log "the docker client is not installed (run scripts/system-deps.sh as root)"; exit 1; }
  mkdir -p "$DIR"
  if alive; then
    log "dockerd already answering on $SOCK"
  else
    # cgroupfs is the only cgroup driver without systemd; overlay2 is picked on ext4/xfs.
    local args=(--data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$PIDFILE" -H "unix://$SOCK"
                --exec-opt native.cgroupdriver=cgroupfs --iptables=false --ip-masq=false --bridge=none)
    log "starting dockerd ${args[*]}"
    setsid nohup dockerd "${args[@]}" >>"$LOG" 2>&1 </dev/null &
    local bgpid=$! i=0
    until alive; do
      if ! kill -0 "$bgpid" 2>/dev/null; then log "dockerd exited; the end of $LOG:"; tail -20 "$LOG" >&2; exit 1; fi
      i=$((i + 1))
      if [ $i -ge 300 ]; then log "dockerd not answering after 30 s; the end of $LOG:"; tail -20 "$LOG" >&2; exit 1; fi
      sleep 0.1
    done
    log "dockerd up (pid $(cat "$PIDFILE"))"
  fi
  echo "export DOCKER_HOST=$DOCKER_HOST"
}

do_stop() {
  local pid
  if [ -f "$PIDFILE" ] && pid=$(cat "$PIDFILE") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    if alive; then
      local ids
      ids=$(docker ps -aq --filter label=forge.sandbox=1)
      [ -z "$ids" ] || docker rm -f $ids >/dev/null || true
    fi
    kill -TERM "$pid"
    local i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$pid" 2>/dev/null; then log "dockerd $pid did not exit after 20 s; sending KILL"; kill -KILL "$pid"; fi
    log "dockerd $pid stopped"
  else
    log "no dockerd running from $PIDFILE"
  fi
  rm -f "$PIDFILE"
  # empty folders dockerd / containerd-shim make outside the state folder (rmdir keeps non-empty ones)
  rmdir /run/containerd/s /run/containerd /run/docker/plugins /run/docker 2>/dev/null || true
}

case "${1:-start}" in
  start) do_start ;;
  stop) do_stop ;;
  status) if alive; then docker version --format "server {{.Server.Version}} on $SOCK"; else echo "not running ($SOCK)"; exit 1; fi ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  *) echo "usage: $0 [start|stop|status|env]" >&2; exit 2 ;;
esac
