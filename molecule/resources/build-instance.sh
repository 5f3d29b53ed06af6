#!/usr/bin/env bash
# Builds the molecule instance image (local/sglang-molecule-host) when it is missing or its
# Dockerfile changed. No registry is reachable, so it builds FROM the local debootstrap base.
set -euo pipefail
here=$(cd "$(dirname "$0")/instance" && pwd)
tag=local/sglang-molecule-host:latest
hash=$(sha256sum "$here/Dockerfile" | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sglang-deploy.source-hash" }}' "$tag" 2>/dev/null)" = "$hash" ]; then
  exit 0
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Dockerfile" "$ctx/"
cp "$(command -v docker)" "$ctx/docker"
docker build -q --label "io.sglang-deploy.source-hash=$hash" -t "$tag" "$ctx" >/dev/null
echo "built $tag"
