"""Air-gapped hosts start the server with FlashInfer's download switch off.

FlashInfer 0.7.2 (flashinfer/jit/cubin_loader.py, get_artifact) downloads a kernel binary it
lacks from its artifact repository, trying 4 times with 35-70 s of back-off in all, unless
FLASHINFER_NO_DOWNLOAD is set, when it raises at once naming the file. The flashinfer_cache role
puts that switch into the server's environment on offline hosts (gpu_host_offline, or
flashinfer_cache_no_download) and leaves every other variable of the cache environment as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roles_testlib import BIN, REPO, ansible_playbook, load_yaml

PLAY = """---
- name: The server environment flashinfer_cache renders
  hosts: all
  gather_facts: false
  tasks:
    - name: Compute the cache key, mount and environment
      ansible.builtin.include_role:
        name: flashinfer_cache
        tasks_from: spec.yml
        public: true
    - name: Write it
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ flashinfer_cache_container_env | to_json }}"
        mode: "0644"
"""


def _env(tmp_path: Path, **extra: object) -> dict[str, str]:
    play, out = tmp_path / "play.yml", tmp_path / "env.json"
    play.write_text(PLAY)
    extra_vars = tmp_path / "vars.json"
    extra_vars.write_text(
        json.dumps(
            {"out": str(out), "sglang_gpu_arch": "120", "ansible_python_interpreter": str(BIN / "python"), **extra}
        )
    )
    run = ansible_playbook("-i", "localhost,", "-c", "local", str(play), "-e", f"@{extra_vars}")
    assert run.rc == 0, run.out[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("extra", "switched_off"),
    [
        ({}, False),
        ({"gpu_host_offline": True}, True),
        ({"flashinfer_cache_no_download": True}, True),
        ({"gpu_host_offline": True, "flashinfer_cache_no_download": False}, False),
    ],
)
def test_offline_hosts_get_flashinfer_no_download_and_nothing_else_changes(tmp_path, extra, switched_off):
    env = _env(tmp_path, **extra)
    assert env.pop("FLASHINFER_NO_DOWNLOAD", None) == ("1" if switched_off else None)
    defaults = load_yaml(REPO / "roles" / "flashinfer_cache" / "defaults" / "main.yml")["flashinfer_cache_env"]
    assert set(env) == set(defaults)
    assert env["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a"
    assert env["TRITON_CACHE_DIR"] == "/root/.cache/flashinfer/triton"
