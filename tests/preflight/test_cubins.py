"""preflight/cubins.py: an air-gapped B200-class host refuses an image without FlashInfer's kernel binaries."""

from __future__ import annotations

import pytest

from preflight import cubins

SGLANG = {"io.sglang-deploy.engine": "sglang", "io.sglang-deploy.flashinfer.version": "0.7.2"}
FOLDERS = ["2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c/fmha/trtllm-gen/",
           "7ec7ac40b9fd48172651b77ff2ebe20d79decc39/deep-gemm/"]  # fmt: skip


@pytest.mark.parametrize(
    ("arch", "expected"),
    [("100", True), ("10.0", True), ("sm_103", True), ("100,100", True), ("120", False), ("12.0", False), ("90", False),
     ("", False), (100, True)],
)  # fmt: skip
def test_only_b200_class_arches_fetch_kernels(arch, expected) -> None:
    assert cubins.fetches_kernels(arch) is expected


def test_the_refusal_names_the_host_image_state_folders_and_both_fixes() -> None:
    labels = {**SGLANG, cubins.LABEL: "none"}
    got = cubins.refusal("b200-07", "reg/sglang-glm5:0.5.23", "100", True, labels, FOLDERS)
    assert got == (
        "b200-07: reg/sglang-glm5:0.5.23 carries no FlashInfer kernel binaries "
        "(io.sglang-deploy.flashinfer.cubins=none), and this B200-class host (sm_100) cannot download them "
        "(FLASHINFER_NO_DOWNLOAD: gpu_host_offline / "
        f"flashinfer_cache_no_download). FlashInfer 0.7.2 fetches {FOLDERS[0]}, {FOLDERS[1]} from NVIDIA's artifact "
        "repository at first use, so the server would stop at its first such kernel. Build the image with "
        "`python3 images/build.py sglang --with-cubins` on a host that reaches the repository (or "
        "`--cubins-repository MIRROR`), or let this host download (flashinfer_cache_no_download: false)."
    )
    unlabelled = cubins.refusal("h", "old:1", "100", True, SGLANG)  # an image from before the label
    assert unlabelled is not None and "(io.sglang-deploy.flashinfer.cubins=missing)" in unlabelled
    assert "fetches its kernel binaries at first use" in unlabelled


@pytest.mark.parametrize(
    ("arch", "no_download", "labels"),
    [
        ("100", True, {**SGLANG, cubins.LABEL: "baked"}),  # the image carries them
        ("100", False, {**SGLANG, cubins.LABEL: "none"}),  # the host may download
        ("120", True, {**SGLANG, cubins.LABEL: "none"}),  # RTX PRO 6000 compiles its kernels
        ("100", True, {"io.sglang-deploy.engine": "test-engine"}),  # the stand-in fetches nothing
    ],
)
def test_no_refusal_where_nothing_would_stop_the_server(arch, no_download, labels) -> None:
    assert cubins.refusal("h", "img", arch, no_download, labels) is None


def test_preflight_reads_the_archives_labels_on_the_controller(tmp_path) -> None:
    """An air-gapped fleet's image comes as an archive whose NAME.json (images/image_archive.py) records
    its labels: preflight refuses there, before any host changes; a registry image is judged after its
    pull (roles/flashinfer_cache/tasks/cubins.yml)."""
    import json

    archive = tmp_path / "reg_sglang-glm5_0.5.23.tar.gz"
    (tmp_path / "reg_sglang-glm5_0.5.23.json").write_text(json.dumps({"labels": {**SGLANG, cubins.LABEL: "none"}}))
    hv = {"sglang_image_source": "archive", "sglang_image_archive_path": str(archive), "sglang_image": "reg/x:1"}
    got = cubins.preflight_refusal("b200-01", hv, "100", True)
    assert got is not None and got.startswith("b200-01: reg/x:1 carries no FlashInfer kernel binaries")
    assert cubins.archive_labels(str(archive)) == {**SGLANG, cubins.LABEL: "none"}
    assert cubins.preflight_refusal("b200-01", {**hv, "flashinfer_cache_no_download": False}, "100", True) is None
    assert cubins.preflight_refusal("b200-01", hv, "100", False) is None  # online: FlashInfer downloads
    assert cubins.preflight_refusal("b200-01", {**hv, "sglang_image_source": "registry"}, "100", True) is None
    assert cubins.preflight_refusal("b200-01", {**hv, "sglang_image_archive_on_host": True}, "100", True) is None
    assert cubins.preflight_refusal("b200-01", {**hv, "sglang_image_archive_path": str(tmp_path / "x.tar")}, "100",
                                    True) is None  # no NAME.json to read  # fmt: skip
