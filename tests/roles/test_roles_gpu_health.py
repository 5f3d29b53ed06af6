# ruff: noqa: E501  (recorded tool output and its messages are long lines)
"""gpu_host's health stage: the gpu_health module's parsers on output recorded on a real H200
(tests/fixtures/nvidia-smi-h200-2026-12-02), each rule with the value it names, and the role
failing a host before anything on it changes. The all-reduce script's arithmetic too."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from roles_testlib import BIN, REPO, ROLES, run_role_tasks

from preflight import gpu_facts

FIX = REPO / "tests" / "fixtures" / "nvidia-smi-h200-2026-12-02"
FIX3 = REPO / "tests" / "fixtures" / "nvidia-smi-h200-2026-12-03"  # the module's own query, with pci.bus_id


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# the module imports the parser as Ansible ships it (ansible.module_utils.gpu_facts); here, the same file
sys.modules["ansible.module_utils.gpu_facts"] = gpu_facts
health = _load("gpu_health", ROLES / "gpu_host" / "library" / "gpu_health.py")
bench = _load("allreduce_bench", REPO / "images" / "sglang" / "allreduce_bench.py")

PARAMS = {
    "expected_count": 1,
    "expected_arch": "90",
    "max_uncorrected_ecc": 0,
    "require_persistence": True,
    "xid_ignore": [],
    "allowed_links": [],
}

# An 8-card PCIe host in nvidia-smi topo -m's layout (hand-written in that format: no such
# host here); GPU3-GPU4 cross the CPU interconnect (SYS), the rest share switches (PIX/PXB).
TOPO_8 = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    + "".join(
        f"GPU{i}\t"
        + "\t".join(
            " X " if i == j else ("SYS" if {i, j} == {3, 4} else ("PIX" if i // 2 == j // 2 else "PXB"))
            for j in range(8)
        )
        + "\t0-63\t0\t\tN/A\n"
        for i in range(8)
    )
)


def _h200():
    gpus = gpu_facts.parse_query((FIX / "nvidia-smi-query.csv").read_text())
    q = gpu_facts.parse_q((FIX / "nvidia-smi-q.txt").read_text())
    topo = health.parse_topo((FIX / "nvidia-smi-topo.txt").read_text())
    return gpus, q, topo


def test_the_role_ships_preflights_parser_itself():
    """One reader of nvidia-smi: the module's module_utils is a link to preflight/gpu_facts.py, and
    the role runs below (test_role_...) prove Ansible ships it in the module's payload."""
    link = ROLES / "gpu_host/module_utils/gpu_facts.py"
    assert link.is_symlink() and link.resolve() == (REPO / "preflight/gpu_facts.py").resolve()
    assert health.facts is gpu_facts


def test_recorded_h200_parses_to_its_real_values_and_is_healthy():
    gpus, q, topo = _h200()
    assert len(gpus) == 1
    g = gpus[0]
    assert (g["index"], g["name"], g["compute_cap"], g["driver_version"]) == ("0", "NVIDIA H200", "9.0", "580.159.04")
    assert (g["persistence_mode"], g["ecc.errors.uncorrected.volatile.total"], g["retired_pages.pending"]) == (
        "Enabled",
        "0",
        None,  # [N/A] on Hopper: row remapping replaced page retirement
    )
    [(_bus, rows)] = q.gpus.items()
    assert rows["Remapped Rows/Pending"] == "No" and rows["Remapped Rows/Remapping Failure Occurred"] == "No"
    assert topo == (["GPU0"], {})
    assert health.judge(gpus, q, topo, [], None, {**PARAMS, "allowed_links": ["NV*"]}) == []


@pytest.mark.parametrize(
    ("change", "params", "needle"),
    [
        ({}, {"expected_count": 8}, "1 GPU(s) visible, expected 8 (sglang_gpu_count)"),
        (
            {},
            {"expected_arch": "120"},
            "GPU0 (NVIDIA H200, GPU-00000000-1111-2222-3333-444444444444): compute capability 9.0, expected sm_120",
        ),
        (
            {"ecc.errors.uncorrected.volatile.total": "3"},
            {},
            "GPU0 (NVIDIA H200, GPU-00000000-1111-2222-3333-444444444444): 3 uncorrected ECC errors since the driver loaded (allowed 0)",
        ),
        ({"persistence_mode": "Disabled"}, {}, "persistence mode Disabled, expected Enabled (nvidia-smi -pm 1)"),
        ({"retired_pages.pending": "Yes"}, {}, "retired pages pending: reboot the host"),
    ],
)
def test_each_rule_names_the_gpu_and_the_value(change, params, needle):
    gpus, q, topo = _h200()
    gpus[0].update(change)
    fails = health.judge(gpus, q, topo, [], None, {**PARAMS, **params})
    assert len(fails) == 1 and needle in fails[0], fails
    assert health.judge(
        gpus, q, topo, [], None, {**PARAMS, **params, "max_uncorrected_ecc": 5, "require_persistence": False}
    ) == (fails if "ECC" not in needle and "persistence" not in needle else [])


def test_module_query_recorded_with_bus_id_maps_onto_nvidia_smi_q():
    gpus = gpu_facts.parse_query((FIX3 / "nvidia-smi-query-health.csv").read_text())
    q = gpu_facts.parse_q((FIX / "nvidia-smi-q.txt").read_text())
    assert gpus[0]["pci.bus_id"] == "00000000:00:06.0" and list(q.gpus) == ["00000000:00:06.0"]
    text = (
        (FIX / "nvidia-smi-q.txt")
        .read_text()
        .replace(
            "        Remapping Failure Occurred                     : No",
            "        Remapping Failure Occurred                     : Yes",
        )
    )
    fails = health.judge(gpus, gpu_facts.parse_q(text), (["GPU0"], {}), [], None, PARAMS)
    assert fails == ["GPU0 (NVIDIA H200, 00000000:00:06.0): row remapping failed: the GPU needs service"]


def test_recorded_one_gpu_allreduce_output_is_a_clean_skip():
    """What the role reads (the last line) of the script's real run on the one-GPU H200."""
    import json

    lines = (FIX3 / "allreduce-bench-1gpu.txt").read_text().splitlines()
    report = json.loads(lines[-1])
    assert report["result"] == "skipped" and report["gpus"] == 1 and "no all-reduce" in report["reason"]
    assert lines[0] == bench.table(report)


def test_row_remapping_pending_is_found_in_nvidia_smi_q():
    gpus, _, topo = _h200()
    text = (
        (FIX / "nvidia-smi-q.txt")
        .read_text()
        .replace(
            "        Pending                                        : No",
            "        Pending                                        : Yes",
            1,
        )
    )
    q = gpu_facts.parse_q(text)
    gpus[0]["pci.bus_id"] = next(iter(q.gpus))  # the query's bus id names the same GPU as -q's section
    fails = health.judge(gpus, q, topo, [], None, PARAMS)
    assert fails == [
        f"GPU0 (NVIDIA H200, {gpus[0]['pci.bus_id']}): row remapping pending: reset the GPU (or reboot) before use"
    ]


def test_xid_events_are_mapped_to_the_gpu_and_explained():
    gpus, q, topo = _h200()
    gpus[0]["pci.bus_id"] = "00000000:3B:00.0"
    log = (
        "[    2.000000] nvidia: loading out-of-tree module\n"
        "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=2394, name=python3, GPU has fallen off the bus.\n"
        "[ 8124.000000] NVRM: Xid (PCI:0000:5e:00): 13, pid=1, Graphics Exception\n"
    )
    xid = gpu_facts.parse_xid(log)
    assert [(e["pci"], e["code"]) for e in xid] == [("0000:3b:00", 79), ("0000:5e:00", 13)]
    fails = health.judge(gpus, q, topo, xid, None, PARAMS)
    assert fails[0].startswith("GPU0: Xid 79 (GPU has fallen off the bus) in the kernel log since boot")
    assert fails[1].startswith("GPU at PCI 0000:5e:00: Xid 13 (graphics engine exception)")
    assert health.judge(gpus, q, topo, xid, None, {**PARAMS, "xid_ignore": [13, 79]}) == []


def test_topology_against_the_links_the_profile_allows():
    names, links = health.parse_topo(TOPO_8)
    assert (
        names == [f"GPU{i}" for i in range(8)] and links[("GPU3", "GPU4")] == "SYS" and links[("GPU0", "GPU1")] == "PIX"
    )
    gpus = [
        {"index": str(i), "name": "RTX PRO 6000", "compute_cap": "12.0", "persistence_mode": "Enabled"}
        for i in range(8)
    ]
    p = {**PARAMS, "expected_count": 8, "expected_arch": "120"}
    fails = health.judge(gpus, gpu_facts.SmiLog(), (names, links), [], None, {**p, "allowed_links": ["PIX", "PXB"]})
    assert fails == ["GPU3-GPU4: link SYS, expected one of PIX, PXB (gpu_host_allowed_links)"]
    assert health.judge(gpus, gpu_facts.SmiLog(), (names, links), [], None, {**p, "allowed_links": ["PIX", "PXB", "SYS"]}) == []
    nv = health.parse_topo(TOPO_8.replace("PXB", "NV18").replace("PIX", "NV18").replace("SYS", "NV18"))
    assert health.judge(gpus, gpu_facts.SmiLog(), nv, [], None, {**p, "allowed_links": ["NV*"]}) == []
    seven = (names[:7], {k: v for k, v in links.items() if "GPU7" not in k})
    assert "nvidia-smi topo -m lists 7 GPU(s), nvidia-smi lists 8" in health.judge(
        gpus, gpu_facts.SmiLog(), seven, [], None, {**p, "allowed_links": ["*"]}
    )


def test_dcgmi_failures_are_named():
    # the result table layout of dcgmi diag (hand-written in its format: DCGM is not installed on the lent machine)
    out = "+---------------------------+----------------+\n| Deployment                |                |\n| Denylist                  | Pass           |\n| NVML Library              | Pass           |\n| Integration               |                |\n| PCIe                      | Fail - GPU: 3  |\n"
    assert health.parse_dcgmi(out) == ["PCIe: Fail - GPU: 3"]
    gpus, q, topo = _h200()
    assert health.judge(gpus, q, topo, [], health.parse_dcgmi(out), PARAMS) == ["dcgmi diag -r 1: PCIe: Fail - GPU: 3"]


def test_allreduce_arithmetic_is_nccl_tests():
    assert bench.sizes(8, 1024) == [8 * 2**20 * 2**k for k in range(8)]  # 8 MB .. 1 GB
    algbw, busbw = bench.bus_bandwidth(2**30, 0.01, 8)
    assert algbw == pytest.approx(2**30 / 0.01 / 1e9) and busbw == pytest.approx(algbw * 2 * 7 / 8)
    assert bench.bus_bandwidth(2**30, 0.01, 2)[1] == pytest.approx(algbw)  # 2 ranks: busbw == algbw
    assert bench.table({"result": "skipped", "reason": "1 GPU(s): no all-reduce to measure"}) == (
        "# all-reduce: skipped: 1 GPU(s): no all-reduce to measure"
    )


def _fake_host(tmp_path: Path, kernel_log: str) -> tuple[Path, Path]:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n  --query-gpu=*) cat {FIX3 / "nvidia-smi-query-health.csv"} ;;\n  -q) cat {FIX / "nvidia-smi-q.txt"} ;;\n'
        f"  topo) cat {FIX / 'nvidia-smi-topo.txt'} ;;\n  *) exit 9 ;;\nesac\n"
    )
    smi.chmod(0o755)
    klog = tmp_path / "kern.log"
    klog.write_text(kernel_log)
    return smi, klog


def _run_role(tmp_path: Path, smi: Path, klog: Path, arch: str = "90"):
    extra = {
        "ansible_python_interpreter": str(BIN / "python"),
        "gpu_host_nvidia_smi": str(smi),
        "sglang_gpu_count": 1,
        "sglang_gpu_arch": arch,
        "gpu_host_kernel_log_command": ["cat", str(klog)],
        "gpu_host_run_dcgmi": False,
    }
    return run_role_tasks(tmp_path, "gpu_host", "health", extra)


def test_role_passes_the_recorded_h200_and_fails_a_sick_one_naming_the_gpu(tmp_path: Path) -> None:
    smi, klog = _fake_host(tmp_path, "[    2.0] clean boot\n")
    ok = _run_role(tmp_path, smi, klog)
    assert ok.rc == 0, ok.out[-3000:]
    assert "1 GPU(s) healthy" in ok.out and "Xid events: 0" in ok.out
    klog.write_text("[ 8123.4] NVRM: Xid (PCI:0000:3b:00): 79, pid=2394, name=python3, GPU has fallen off the bus.\n")
    bad = _run_role(tmp_path, smi, klog, arch="120")
    assert bad.rc != 0
    assert "GPU health: " in bad.out and "compute capability 9.0, expected sm_120" in bad.out
    assert "Xid 79 (GPU has fallen off the bus)" in bad.out


def test_xid_events_before_the_last_good_deploy_are_listed_not_failed(tmp_path: Path) -> None:
    log = (
        "[ 100.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, no stamp on this line\n"
        "[ 900.0] NVRM: Xid (PCI:0000:3b:00): 43, pid=1, GPU stopped processing\n"
    )
    xid = gpu_facts.parse_xid(log)
    assert [(e["code"], e["t"]) for e in xid] == [(79, 100.5), (13, None), (43, 900.0)]
    gpus = gpu_facts.parse_query((FIX3 / "nvidia-smi-query-health.csv").read_text())
    q = gpu_facts.parse_q((FIX / "nvidia-smi-q.txt").read_text())
    fails = health.judge(gpus, q, None, xid, None, {**PARAMS, "expected_arch": "", "xid_after_s": 500.0})
    xids = [f for f in fails if "Xid" in f]
    assert len(xids) == 2 and all("in the kernel log since the last good deploy" in f for f in xids)
    assert "Xid 13" in xids[0] and "Xid 43" in xids[1]  # no stamp: counted; after the deploy: counted
    since_boot = [f for f in health.judge(gpus, q, None, xid, None, {**PARAMS, "expected_arch": ""}) if "Xid" in f]
    assert len(since_boot) == 3 and all("since boot" in f for f in since_boot)
    record = tmp_path / "sglang.last-good.json"
    record.write_text("{}")
    os.utime(record, (1_000_000.0, 1_000_000.0))
    assert health.since_boot(str(record), now=1_000_600.0, uptime_s=1_000.0) == 400.0  # boot at 999,600
    assert health.since_boot(str(record), now=1_000_600.0, uptime_s=10.0) == 0.0  # written before this boot
    assert health.since_boot(str(tmp_path / "none.json"), now=1.0, uptime_s=1.0) is None


def test_role_counts_xid_from_the_last_good_record(tmp_path: Path) -> None:
    smi, klog = _fake_host(tmp_path, "[    5.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    record = tmp_path / "sglang.last-good.json"
    record.write_text("{}")  # written now: long after 5 s from boot
    extra = {
        "ansible_python_interpreter": str(BIN / "python"),
        "gpu_host_nvidia_smi": str(smi),
        "sglang_gpu_count": 1,
        "sglang_gpu_arch": "90",
        "gpu_host_kernel_log_command": ["cat", str(klog)],
        "gpu_host_run_dcgmi": False,
        "gpu_host_xid_since_file": str(record),
    }
    ok = run_role_tasks(tmp_path, "gpu_host", "health", extra)
    assert ok.rc == 0, ok.out[-3000:]
    assert "Xid events: 1 (counted since the last good deploy, " in " ".join(ok.out.split())
    record.unlink()
    bad = run_role_tasks(tmp_path, "gpu_host", "health", extra)
    assert bad.rc != 0 and "Xid 79 (GPU has fallen off the bus) in the kernel log since boot" in " ".join(
        bad.out.split()
    )
