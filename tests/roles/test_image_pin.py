"""Supply: every host after the canary deploys the canary's image, not what the tag says by then.
Two hosts (local connection, the real docker engine and the real sglang_image role, serial 1 as
the rollout runs them); between the canary and the next wave the tag is moved to another build
(release-b, a TEST ENGINE image): the second host fails, naming both image IDs. Without the move,
both hosts record the same ID."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from roles_testlib import BIN, ansible_playbook, docker_json, docker_ok

RELEASE_A = "local/sglang-test-engine:release-a"
RELEASE_B = "local/sglang-test-engine:release-b"

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        not docker_ok() or any(docker_json("image", "inspect", r) is None for r in (RELEASE_A, RELEASE_B)),
        reason="needs docker and the test-engine images (scripts/setup.sh builds them)",
    ),
]

PLAY = """---
- name: Two waves, the tag moved in between (or not)
  hosts: all
  gather_facts: false
  serial: 1
  tasks:
    - name: Move the tag before the second wave
      ansible.builtin.command:
        argv: [docker, tag, "{{ move_to }}", "{{ sglang_image }}"]
      changed_when: true
      when: inventory_hostname == 'wave2' and move_to | length > 0

    - name: Deliver the image
      ansible.builtin.include_role:
        name: sglang_image

    - name: Say which image this host got
      ansible.builtin.debug:
        msg: "IMAGE {{ inventory_hostname }} {{ sglang_image_id }}"
"""


@pytest.fixture
def tag() -> Iterator[str]:
    name = f"local/sglang-test-engine:pintest-{os.getpid()}-{secrets.token_hex(2)}"
    subprocess.run(["docker", "tag", RELEASE_A, name], check=True)
    yield name
    subprocess.run(["docker", "rmi", name], capture_output=True, check=False)


def _run(tmp_path: Path, tag: str, move_to: str):
    play = tmp_path / "pin.yml"
    play.write_text(PLAY)
    return ansible_playbook(
        "-i",
        "canary,wave2,",
        "-c",
        "local",
        str(play),
        "-e",
        f"sglang_image={tag} sglang_image_source=local move_to={move_to}",
        "-e",
        f"ansible_python_interpreter={BIN / 'python'}",
    )


def _ids(out: str) -> dict[str, str]:
    return {w[0]: w[1] for line in out.splitlines() if "IMAGE " in line for w in [line.split("IMAGE ", 1)[1].split()]}


def test_unmoved_tag_both_waves_get_the_canarys_image(tmp_path: Path, tag: str) -> None:
    run = _run(tmp_path, tag, "")
    assert run.rc == 0, run.out[-4000:]
    want = docker_json("image", "inspect", RELEASE_A)["Id"]
    assert {k: v.strip("'\"") for k, v in _ids(run.out).items()} == {"canary": want, "wave2": want}


def test_tag_moved_after_the_canary_fails_the_next_wave_naming_both_ids(tmp_path: Path, tag: str) -> None:
    run = _run(tmp_path, tag, RELEASE_B)
    assert run.rc != 0
    a, b = docker_json("image", "inspect", RELEASE_A)["Id"], docker_json("image", "inspect", RELEASE_B)["Id"]
    flat = " ".join(run.out.split())
    want = f"{tag} on wave2 is {b}, but this host must deploy {a}, the image of canary canary: the tag moved since"
    assert want in flat, flat[-3000:]
    assert "fatal: [canary]" not in run.out
