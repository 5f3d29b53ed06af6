"""flashinfer_cache tasks/build.yml: warm means the volume holds this start's build, not just its key.

Real Ansible runs the role's task file against localhost with the facts the cache probe and the
server's render leave (the manifest's builds, warm by key, this start's build); the facts it sets are
read back. tests/roles/test_cache_builds.py runs the same decision in a real rollout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roles_testlib import BIN, ansible_playbook

# the inputs as play vars_files: below set_fact in Ansible's precedence, as the real facts are (an
# extra var would win over the set_fact under test)
PLAY = """---
- name: The cache's verdict for this start
  hosts: all
  gather_facts: false
  vars_files: [vars.json]
  tasks:
    - name: Decide
      ansible.builtin.include_role:
        name: flashinfer_cache
        tasks_from: build.yml
    - name: Write the facts
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'warm': flashinfer_cache_warm, 'manifest': flashinfer_cache_manifest,
                      'start_build': flashinfer_cache_start_build} | to_json }}"
        mode: "0644"
"""
B23 = {"id": "sglang0.5.23-aaaaaaaaaaaa", "about": "sglang 0.5.23, --tp-size 8"}
B24 = {"id": "sglang0.5.24-bbbbbbbbbbbb", "about": "sglang 0.5.24, --tp-size 8"}
WARM = {"warm": True, "modules": 3}


def _decide(tmp_path: Path, manifest: dict, warm: bool, build: dict) -> dict:
    play, out = tmp_path / "play.yml", tmp_path / "out.json"
    play.write_text(PLAY)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"out": str(out), "flashinfer_cache_manifest": manifest, "flashinfer_cache_warm": warm,
                                 "flashinfer_cache_build": build, "flashinfer_cache_name": "fic-x",
                                 "sglang_server_ready_timeout_cold_s": 5400,
                                 "ansible_python_interpreter": str(BIN / "python")}))  # fmt: skip
    run = ansible_playbook("-i", "localhost,", "-c", "local", str(play))
    assert run.rc == 0, run.out[-3000:]
    return {**json.loads(out.read_text()), "out": " ".join(run.out.split())}  # the YAML callback wraps lines


def test_warm_when_the_volume_holds_this_build(tmp_path: Path) -> None:
    got = _decide(tmp_path, {**WARM, "builds": {B23["id"]: B23["about"], B24["id"]: B24["about"]}}, True, B24)
    assert got["warm"] is True and got["manifest"]["warm"] is True and "why" not in got["manifest"]
    assert got["start_build"] == B24 and "fic-x is cold for this start" not in got["out"]


@pytest.mark.parametrize(
    ("builds", "held"),
    [({B23["id"]: B23["about"]}, "sglang 0.5.23, --tp-size 8"), ({}, "no recorded build")],
    ids=["another-release", "a-manifest-without-builds"],
)
def test_cold_when_the_volume_of_the_key_lacks_this_build(tmp_path: Path, builds: dict, held: str) -> None:
    got = _decide(tmp_path, {**WARM, "builds": builds}, True, B24)
    why = f"built for {held}, not for this start (sglang 0.5.24, --tp-size 8): its kernels compile now"
    assert got["warm"] is False and got["manifest"] == {**WARM, "warm": False, "builds": builds, "why": why}
    assert f"FlashInfer cache fic-x is cold for this start, with the cold deadline (5400 s): {why}" in got["out"]


def test_a_volume_cold_by_its_key_stays_cold_with_its_own_reason(tmp_path: Path) -> None:
    manifest = {"warm": False, "why": "no manifest (never archived from, nor seeded)"}
    got = _decide(tmp_path, manifest, False, B23)
    assert got["warm"] is False and got["manifest"] == manifest
    assert "fic-x is cold for this start" not in got["out"]  # nothing new to say: it was cold already
