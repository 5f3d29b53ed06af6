#!/usr/bin/env bash
# One-time (and safe to repeat) set-up of a fresh Debian 12 machine for this bundle:
# Debian's docker.io with a running dockerd, a Python 3.12 virtualenv with the pinned
# requirements, and the locally built base image that every image here builds FROM
# (no container registry is reachable from CI or from air-gapped build hosts).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! docker version >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/dockerd.log)"
  setsid dockerd >/var/log/dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 60); do docker version >/dev/null 2>&1 && break; sleep 1; done
  docker version >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/dockerd.log" >&2; tail -20 /var/log/dockerd.log >&2; exit 1; }
fi

PY312=""
for cand in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 python3.12; do
  # pyenv shims exist for every version but fail unless that version is selected: run it to be sure
  if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then PY312=$cand; break; fi
done
[ -n "$PY312" ] || { echo "Python 3.12 is required for the Ansible controller (ansible-core 2.21)" >&2; exit 1; }
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
  log "creating .venv from $PY312"
  rm -rf .venv
  "$PY312" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing pinned Python requirements"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  # compat mode: a plain path entry in a .pth file. setuptools' default editable install for this flat
  # layout adds an import hook whose own imports cost every Python start in the venv 17 ms (30 ms
  # instead of 13 for `python -c pass`): every Ansible module on a local host, every gate, every test
  # subprocess. The default stays the fallback should a setuptools release drop compat mode.
  .venv/bin/python -m pip install -q --no-deps -e . --config-settings editable_mode=compat 2>/dev/null \
    || .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi

# promtool, Prometheus' own metrics linter, for the tests of the textfile metrics: the one binary
# from Debian's prometheus package (a 19 MB download, about 2 s), not the package itself (96 MB
# installed, a Prometheus server and its service, web assets).
if [ ! -x .venv/bin/promtool ]; then
  log "installing promtool from Debian's prometheus package into .venv/bin"
  deb_dir=$(mktemp -d)
  (cd "$deb_dir" && { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus >/dev/null; }; })
  dpkg-deb --fsys-tarfile "$deb_dir"/prometheus_*.deb | tar -xO ./usr/bin/promtool > .venv/bin/promtool.tmp
  chmod 0755 .venv/bin/promtool.tmp && mv .venv/bin/promtool.tmp .venv/bin/promtool
  rm -rf "$deb_dir"
fi

BASE=local/debian:bookworm
bash scripts/debian-base.sh bookworm
# The test engine "releases" the local inventory and molecule roll out (not SGLang: an
# SGLang-API-compatible fake for machines without GPUs), with offline archives for the
# air-gapped delivery path. Skipped when already current.
log "building the test-engine images and their offline archives (build/images)"
.venv/bin/python images/build.py test-engine --release all --archive-dir build/images
log "ready: docker $(docker version --format '{{.Server.Version}}'), $(.venv/bin/python --version), base image $BASE"
