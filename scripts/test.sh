#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: set-up, lint gates, pytest, molecule.
# Every stage must pass; a stage that runs no test fails (pytest's exit 5 included).
#   bash scripts/test.sh            everything (what .ci/run calls)
#   bash scripts/test.sh lint       lint gates only
#   bash scripts/test.sh pytest     pytest only (after set-up)
#   bash scripts/test.sh molecule   molecule scenarios only
#   bash scripts/test.sh gpu-image  NOT part of `all` (nor of CI): the release check of the production GPU
#                                   image: build it here (local CUDA base), test it inside itself, write
#                                   benchmarks/results/gpu-image-<date>.{json,log} (benchmarks/gpu_image.py)
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
  # tests/benchmarks first: xdist hands out files in this order, and its client-overhead smoke
  # (about 150 s, mostly waiting on pip and the modelled engine) must not be the last to start.
  local suites=(tests/benchmarks tests/sglang_real tests/validate tests/testengine tests/images tests/roles tests/rollout tests/preflight tests/hooks)
  banner "pytest: not docker (2 workers)"
  pytest_or_fail -n 2 --dist loadfile -m "not docker" --durations=8 "${suites[@]}"
  if [ "$stage" = all ]; then start_instance_build; fi
  banner "pytest: docker (2 workers)"
  # the two longest files first (about 11-12 min each), one per worker, the rest filling in around
  # them; named twice, pytest collects them once
  local longest=(tests/roles/test_rollout_unreachable.py tests/roles/test_roles_local_rollout.py)
  pytest_or_fail -n 2 --dist loadfile -m "docker and not gpu_image" --durations=8 "${longest[@]}" "${suites[@]}"
}

# The molecule scenarios run in three lanes at once, each on its own docker network and names:
# `fleet` (three hosts behind HAProxy, the longest) in the foreground; `default` then `upgrade` one
# after the other in a background lane; `hosts` (apt on two fresh hosts, mostly waiting on the mirror;
# no server containers) in another. Side by side they finish in the fleet's time: a rollout waits on
# SSH round trips, server starts and gates, and the apt lane on the mirror. Each lane's log, with its
# scenarios' start and end times: build/molecule/<lane>.log. A lane stopped (the EXIT trap, when the
# foreground fails) stops the molecule run it is waiting on, so nothing keeps creating instances.
declare -A bg_pids=()
molecule_bg() {  # lane name, then its scenarios, one after the other
  local lane=$1
  shift
  banner "molecule lane $lane: $* (in the background; log: build/molecule/$lane.log)"
  (
    child=""
    trap 'kill "$child" 2>/dev/null; exit 143' TERM
    for scenario in "$@"; do
      printf '\n==== molecule test -s %s (t=%ss)\n' "$scenario" "$((SECONDS - t0))"
      molecule test -s "$scenario" &
      child=$!
      wait "$child" || { echo "molecule test -s $scenario failed" >&2; exit 1; }
      printf '\n==== molecule test -s %s passed (t=%ss)\n' "$scenario" "$((SECONDS - t0))"
    done
  ) > "build/molecule/$lane.log" 2>&1 &
  bg_pids[$lane]=$!
  trap 'kill "${bg_pids[@]}" 2>/dev/null || true' EXIT
}
molecule_wait() {
  banner "molecule: waiting for lane $1"
  if ! wait "${bg_pids[$1]}"; then
    cat "build/molecule/$1.log"
    echo "molecule lane $1 failed (log above)" >&2
    exit 1
  fi
  unset "bg_pids[$1]"
  grep '^==== ' "build/molecule/$1.log"
  tail -n 30 "build/molecule/$1.log"
  banner "molecule lane $1 passed"
}

run_molecule() {
  wait_instance_build
  mkdir -p build/molecule
  local lanes=(hosts default upgrade fleet) scenario
  molecule_bg hosts hosts
  molecule_bg default-upgrade default upgrade
  banner "molecule test -s fleet"
  molecule test -s fleet
  banner "molecule test -s fleet passed"
  molecule_wait hosts
  molecule_wait default-upgrade
  trap - EXIT
  # a scenario added later runs here, alone, until it is given a lane above
  for config in molecule/*/molecule.yml; do
    scenario=$(basename "$(dirname "$config")")
    [[ " ${lanes[*]} " == *" $scenario "* ]] && continue
    banner "molecule test -s $scenario"
    molecule test -s "$scenario"
  done
}

case "$stage" in
  lint) run_lint ;;
  pytest) shift; run_pytest "$@" ;;
  molecule) run_molecule ;;
  gpu-image) shift; python benchmarks/gpu_image.py "$@" ;;
  all) run_lint; run_pytest; run_molecule ;;
  *) echo "usage: scripts/test.sh [all|lint|pytest|molecule|gpu-image]" >&2; exit 2 ;;
esac
banner "done: $stage"
