#!/usr/bin/env bash
# Builds the molecule instance images when missing or when their inputs changed, and the SSH key
# the scenarios log in with (user `deploy`, passwordless sudo). No registry is reachable, so they
# build FROM the local debootstrap bases (scripts/debian-base.sh):
#   local/sglang-molecule-host:latest           Debian 12 with python3-requests (default, fleet, upgrade)
#   local/sglang-molecule-host:bookworm-engine  Debian 12 with an engine already there: STAND-IN
#                                               docker-ce and nvidia-container-toolkit packages
#   local/sglang-molecule-host:trixie-bare      Debian 13 with python3 and the STAND-IN toolkit only (hosts)
#   local/sglang-molecule-lb:latest             Debian 12 with Debian's HAProxy: the fleet scenario's load balancer
set -euo pipefail
res=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$res/../.." && pwd)
key_dir=/tmp/sglang-molecule-ssh
if [ ! -f "$key_dir/id_ed25519" ]; then
  install -d -m 0700 "$key_dir"
  ssh-keygen -q -t ed25519 -N '' -C sglang-molecule -f "$key_dir/id_ed25519"
fi
chmod 0644 "$key_dir/id_ed25519.pub"

build() {  # build TAG BASE_SUITE PACKAGES STANDIN_DEBS...
  local tag=$1 suite=$2 packages=$3
  shift 3
  local hash
  hash=$( { cat "$res/instance/Dockerfile"; echo "$suite|$packages|$*";
            for d in "$@"; do (cd "$res/standin-debs/$d" && find . -type f -print0 | sort -z | xargs -0 sha256sum); done; } \
          | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sglang-deploy.source-hash" }}' "$tag" 2>/dev/null)" = "$hash" ]; then
    return 0
  fi
  bash "$root/scripts/debian-base.sh" "$suite"
  local ctx
  ctx=$(mktemp -d)
  cp "$res/instance/Dockerfile" "$ctx/"
  cp "$(command -v docker)" "$ctx/docker"
  mkdir "$ctx/standin"
  for d in "$@"; do dpkg-deb --root-owner-group -b "$res/standin-debs/$d" "$ctx/standin/$d.deb" >/dev/null; done
  docker build -q --label "io.sglang-deploy.source-hash=$hash" --build-arg "BASE_IMAGE=local/debian:$suite" \
    --build-arg "PACKAGES=$packages" -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "built $tag"
}

build local/sglang-molecule-host:latest bookworm "python3 python3-requests ca-certificates procps"
if [ "${1:-}" = all ] || [ "${1:-}" = hosts ]; then
  build local/sglang-molecule-host:bookworm-engine bookworm "python3 python3-requests python3-debian" docker-ce nvidia-container-toolkit
  build local/sglang-molecule-host:trixie-bare trixie "python3" nvidia-container-toolkit
fi
if [ "${1:-}" = all ] || [ "${1:-}" = fleet ]; then
  # the fleet scenario's load balancer: Debian's HAProxy (molecule/resources/lb)
  lb_hash=$(cat "$res/lb/Dockerfile" | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sglang-deploy.source-hash" }}' local/sglang-molecule-lb:latest 2>/dev/null)" != "$lb_hash" ]; then
    docker build -q --label "io.sglang-deploy.source-hash=$lb_hash" -t local/sglang-molecule-lb:latest "$res/lb" >/dev/null
    echo "built local/sglang-molecule-lb:latest"
  fi
fi
