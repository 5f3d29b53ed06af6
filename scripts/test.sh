#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: set-up, lint gates, pytest, molecule.
# Every stage must pass; a stage that runs no test fails (pytest's exit 5 included).
#   bash scripts/test.sh            everything (what .ci/run calls)
#   bash scripts/test.sh lint       lint gates only
#   bash scripts/test.sh pytest     pytest only (after set-up)
#   bash scripts/test.sh molecule   molecule scenarios only
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-all}
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 ANSIBLE_NOCOLOR=1
t0=$SECONDS
banner() { printf '\n==== %s (t=%ss)\n' "$*" "$((SECONDS - t0))"; }

run_lint() {
  banner "lint: ruff"
  ruff check .
  banner "lint: yamllint"
  yamllint -s .
  banner "lint: hadolint"
  find images molecule -name Dockerfile -print0 | xargs -0 -r hadolint
  banner "lint: ansible-playbook --syntax-check"
  for inv in inventory/local inventory/example; do
    ansible-playbook --syntax-check -i "$inv" deploy.yml
  done
  banner "lint: ansible-lint (production profile)"
  ansible-lint
}

pytest_or_fail() {
  set +e
  python -m pytest "$@"
  rc=$?
  set -e
  if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: that is a failure here" >&2; exit 1; fi
  [ "$rc" -eq 0 ] || exit "$rc"
}

# The molecule instance images (debootstrap, apt: mostly waiting on the mirror) build in the
# background while the docker tests run; run_molecule waits for them.
build_pid=""
start_instance_build() {
  mkdir -p build/molecule
  banner "molecule instance images: building in the background (log: build/molecule/build-instance.log)"
  bash molecule/resources/build-instance.sh all > build/molecule/build-instance.log 2>&1 &
  build_pid=$!
  trap 'kill "$build_pid" 2>/dev/null || true' EXIT
}
wait_instance_build() {
  [ -n "$build_pid" ] || start_instance_build
  banner "molecule instance images: waiting for the build"
  if ! wait "$build_pid"; then
    cat build/molecule/build-instance.log
    echo "building the molecule instance images failed (log above)" >&2
    exit 1
  fi
  trap - EXIT
  tail -n 5 build/molecule/build-instance.log
}

run_pytest() {
  if [ "$#" -gt 0 ]; then banner "pytest $*"; pytest_or_fail "$@"; return; fi
  # Two stages, two workers each (pytest-xdist, one test file per worker): first the tests that
  # leave the Docker daemon alone (loopback servers on free ports, ansible-playbook with local
  # connections in temp folders, parsers), then those marked `docker`. Each docker test file uses
  # its own container, volume, image-tag and port names, so two files can share the daemon; a
  # rollout there mostly waits on Ansible's task round trips, which leaves a core free for the other.
  # The slowest tests of each stage are listed.
  local suites=(tests/validate tests/testengine tests/images tests/roles tests/benchmarks)
  banner "pytest: not docker (2 workers)"
  pytest_or_fail -n 2 --dist loadfile -m "not docker" --durations=8 "${suites[@]}"
  if [ "$stage" = all ]; then start_instance_build; fi
  banner "pytest: docker (2 workers)"
  pytest_or_fail -n 2 --dist loadfile -m docker --durations=8 "${suites[@]}"
}

run_molecule() {
  wait_instance_build
  # `hosts` (apt on two fresh hosts: mostly waiting on the mirror; its own network, no server
  # containers) runs beside the others; the rest share the machine's daemon, ports and CPU: one at a time.
  mkdir -p build/molecule
  banner "molecule test -s hosts (beside the others; log: build/molecule/hosts.log)"
  molecule test -s hosts > build/molecule/hosts.log 2>&1 &
  hosts_pid=$!
  trap 'kill "$hosts_pid" 2>/dev/null || true' EXIT
  for config in molecule/*/molecule.yml; do
    scenario=$(basename "$(dirname "$config")")
    [ "$scenario" = hosts ] && continue
    banner "molecule test -s $scenario"
    molecule test -s "$scenario"
  done
  banner "molecule: waiting for hosts"
  if ! wait "$hosts_pid"; then
    cat build/molecule/hosts.log
    echo "molecule test -s hosts failed (log above)" >&2
    exit 1
  fi
  trap - EXIT
  tail -n 30 build/molecule/hosts.log
}

case "$stage" in
  lint) run_lint ;;
  pytest) shift; run_pytest "$@" ;;
  molecule) run_molecule ;;
  all) run_lint; run_pytest; run_molecule ;;
  *) echo "usage: scripts/test.sh [all|lint|pytest|molecule]" >&2; exit 2 ;;
esac
banner "done: $stage"
