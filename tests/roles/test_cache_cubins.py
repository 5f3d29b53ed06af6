"""flashinfer_cache tasks/cubins.yml, run by real Ansible right after the image is delivered: an air-gapped
B200-class host stops before its drain when the image carries no FlashInfer kernel binaries."""

from __future__ import annotations

from pathlib import Path

import pytest
from roles_testlib import BIN, docker_json, docker_ok, run_role_tasks

IMAGE = "local/sglang-test-engine:release-a"  # stands in for the image the helper reads (no cubins record)
pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not docker_ok() or docker_json("image", "inspect", IMAGE) is None,
                       reason="needs docker and the test-engine images (scripts/setup.sh builds them)"),
]  # fmt: skip


def _run(tmp_path: Path, **over: object):
    labels = {"io.sglang-deploy.engine": "sglang", "io.sglang-deploy.flashinfer.version": "0.7.2",
              "io.sglang-deploy.flashinfer.cubins": "none"}  # fmt: skip
    extra = {"sglang_image_labels": labels, "sglang_image_ref": "reg/sglang-glm5:0.5.23", "sglang_image_id": IMAGE,
             "gpu_host_gpu_arch": "100", "gpu_host_offline": True, "ansible_python_interpreter": str(BIN / "python"),
             "flashinfer_cache_probe_container_name": "cubins-test-probe",
             **over}  # fmt: skip
    return run_role_tasks(tmp_path, "flashinfer_cache", "cubins.yml", extra)


def test_an_air_gapped_b200_host_refuses_an_image_without_kernel_binaries(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert run.rc != 0 and run.recap["localhost"]["failed"] == 1
    text = " ".join(run.out.split())
    assert "localhost: reg/sglang-glm5:0.5.23 carries no FlashInfer kernel binaries" in text
    assert "(io.sglang-deploy.flashinfer.cubins=none), and this B200-class host (sm_100) cannot download them" in text
    assert "FlashInfer 0.7.2 fetches its kernel binaries at first use" in text  # this image has no cubins record


@pytest.mark.parametrize(
    "over",
    [{"gpu_host_offline": False}, {"gpu_host_gpu_arch": "120"},
     {"sglang_image_labels": {"io.sglang-deploy.engine": "sglang", "io.sglang-deploy.flashinfer.cubins": "baked"}}],
    ids=["may-download", "rtx-pro-6000", "baked"],
)  # fmt: skip
def test_nothing_stops_a_host_that_can_get_its_kernels(tmp_path: Path, over: dict) -> None:
    run = _run(tmp_path, **over)
    assert run.rc == 0 and run.recap["localhost"]["failed"] == 0, run.out[-3000:]
