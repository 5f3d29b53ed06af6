#!/usr/bin/env bash
# Builds local/debian:SUITE (bookworm, trixie) with debootstrap when it is missing: no container
# registry is reachable from CI or from air-gapped build hosts, so every image here builds FROM
# a base made from the Debian mirror apt itself uses. About 30-45 s per suite.
#   bash scripts/debian-base.sh bookworm
set -euo pipefail
suite=${1:?usage: scripts/debian-base.sh SUITE}
tag=local/debian:$suite
docker image inspect "$tag" >/dev/null 2>&1 && exit 0
# the mirror apt itself uses (deb822 "URIs:" or one-line "deb URI suite"), never a commented one
mirror=$( { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}';
            cat /etc/apt/sources.list 2>/dev/null | awk '/^deb / {print $2}'; } | grep -v security | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
echo "building base image $tag with debootstrap from $mirror"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=/tmp/debootstrap-$suite.log
debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
tar -C "$tmp" -c . | docker import - "$tag" >/dev/null
