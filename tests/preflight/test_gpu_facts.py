# ruff: noqa: E501  (recorded tool output is long lines)
"""The one reader of nvidia-smi and the kernel log (preflight/gpu_facts.py), on the bytes a real H200
answered (tests/fixtures/nvidia-smi-h200-2026-12-02, -03): every value of `nvidia-smi -q` under its
section path, the CSV query with its units and [N/A], Xid lines and the last good deploy's clock. The
gpu_host role ships the same file to its hosts (tests/roles/test_roles_gpu_health.py)."""

from __future__ import annotations

from pathlib import Path

from preflight import gpu_facts

REPO = Path(__file__).resolve().parents[2]
Q = (REPO / "tests/fixtures/nvidia-smi-h200-2026-12-02/nvidia-smi-q.txt").read_text()
QUERY = (REPO / "tests/fixtures/nvidia-smi-h200-2026-12-03/nvidia-smi-query-health.csv").read_text()
BUS = "00000000:00:06.0"


def test_recorded_nvidia_smi_q_reads_every_value_under_its_section_path() -> None:
    log = gpu_facts.parse_q(Q)
    assert log.header == {
        "Timestamp": "Wed Dec  2 18:56:44 2026", "Driver Version": "580.159.04", "CUDA Version": "13.0",
        "Attached GPUs": "1",
    }  # fmt: skip
    assert (log.driver_version, log.driver_major) == ("580.159.04", 580)
    [(bus, gpu)] = log.gpus.items()
    assert bus == BUS.lower() and len(gpu) == 202  # every "name : value" line of the GPU's block
    assert {k: gpu[k] for k in (
        "Product Name", "Product Architecture", "MIG Mode/Current", "MIG Mode/Pending", "GPU UUID", "PCI/Bus Id",
        "PCI/GPU Link Info/PCIe Generation/Max", "PCI/GPU Link Info/Link Width/Current", "FB Memory Usage/Total",
        "Remapped Rows/Pending", "Remapped Rows/Remapping Failure Occurred",
        "Remapped Rows/Bank Remap Availability Histogram/Max", "Retired Pages/Pending Page Blacklist",
        "GPU Memory Power Readings/Average Power Draw", "Fabric/State", "Fabric/Status", "Processes",
    )} == {
        "Product Name": "NVIDIA H200", "Product Architecture": "Hopper", "MIG Mode/Current": "Disabled",
        "MIG Mode/Pending": "Disabled", "GPU UUID": "GPU-00000000-1111-2222-3333-444444444444",
        "PCI/Bus Id": BUS, "PCI/GPU Link Info/PCIe Generation/Max": "5", "PCI/GPU Link Info/Link Width/Current": "16x",
        "FB Memory Usage/Total": "143771 MiB", "Remapped Rows/Pending": "No",
        "Remapped Rows/Remapping Failure Occurred": "No", "Remapped Rows/Bank Remap Availability Histogram/Max": "3072 bank(s)",
        "Retired Pages/Pending Page Blacklist": "N/A", "GPU Memory Power Readings/Average Power Draw": "40.61 W",
        "Fabric/State": "N/A", "Fabric/Status": "N/A", "Processes": "None",
    }  # fmt: skip
    assert (log.memory_mib, log.mig, log.fabric) == ([143771], ["Disabled"], ["N/A / N/A"])


def test_two_gpus_keep_their_own_values_in_order_and_crlf_reads_as_lf() -> None:
    head, _, block = Q.partition(f"GPU {BUS}\n")
    second = block.replace("143771 MiB", "97887 MiB").replace("        Current                                        : Disabled", "        Current                                        : Enabled", 1)
    text = (head + f"GPU {BUS}\n" + block + "GPU 00000000:3B:00.0\n" + second).replace("\n", "\r\n")
    log = gpu_facts.parse_q(text)
    assert list(log.gpus) == [BUS, "00000000:3b:00.0"]
    assert (log.memory_mib, log.mig) == ([143771, 97887], ["Disabled", "Enabled"])
    assert log.each("Product Name") == ["NVIDIA H200", "NVIDIA H200"]
    assert gpu_facts.parse_q("").gpus == {} and gpu_facts.parse_q("no log").driver_version == "0"
    assert gpu_facts.parse_q("Driver Version : 0x\n").driver_major == 0


def test_recorded_query_reads_per_gpu_with_units_dropped_and_not_applicable_as_none() -> None:
    [gpu] = gpu_facts.parse_query(QUERY)
    assert gpu == {
        "index": "0", "name": "NVIDIA H200", "uuid": "GPU-00000000-1111-2222-3333-444444444444", "pci.bus_id": BUS,
        "compute_cap": "9.0", "driver_version": "580.159.04", "persistence_mode": "Enabled", "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": "0", "retired_pages.pending": None,
    }  # fmt: skip
    assert gpu_facts.QUERY_FIELDS.split(",") == list(gpu)  # the recording answers the query the code asks
    older = (REPO / "tests/fixtures/nvidia-smi-h200-2026-12-02/nvidia-smi-query.csv").read_text()
    assert gpu_facts.parse_query(older)[0]["memory.total"] == "143771 MiB"  # "memory.total [MiB]" -> memory.total
    assert gpu_facts.parse_query("") == []
    assert gpu_facts.parse_query("index, compute_cap\r\n0, 12.0\r\n1, 12.0\r\n") == [
        {"index": "0", "compute_cap": "12.0"}, {"index": "1", "compute_cap": "12.0"},
    ]  # fmt: skip
    assert [gpu_facts.value(v) for v in ("[N/A]", "N/A", "[Not Supported]", "Not Supported", " ", None, " 7 ")] == [
        None, None, None, None, None, None, "7",
    ]  # fmt: skip


def test_arch_and_bus_ids_compare_as_the_inventory_writes_them() -> None:
    assert [gpu_facts.arch(v) for v in ("12.0", "sm_120", 120, "10.0", None, "")] == ["120", "120", "120", "100", "", ""]
    assert gpu_facts.pci_key("00000000:3B:00.0") == gpu_facts.pci_key("0000:3b:00") == "3b:00"
    assert gpu_facts.pci_key("weird") == "weird" and gpu_facts.pci_key(None) == ""


def test_xid_lines_count_from_the_last_good_deploy_naming_the_gpu() -> None:
    log = (
        "[    2.000000] nvidia: loading out-of-tree module\n"
        "[  100.500000] NVRM: Xid (PCI:0000:00:06): 79, pid=2394, name=python3, GPU has fallen off the bus.\n"
        "NVRM: Xid (PCI:0000:5e:00): 13, pid=1, no stamp on this line\n"
        "[  900.000000] NVRM: Xid (0000:00:06.0): 999, pid=1, a code the catalogue lacks\n"
    )
    events = gpu_facts.parse_xid(log)
    assert [(e["pci"], e["code"], e["t"]) for e in events] == [
        ("0000:00:06", 79, 100.5), ("0000:5e:00", 13, None), ("0000:00:06.0", 999, 900.0),
    ]  # fmt: skip
    assert events[0]["line"] == log.splitlines()[1]
    gpus = gpu_facts.parse_query(QUERY)
    assert gpu_facts.xid_failures(events, gpus, None, []) == [
        f"GPU0: Xid 79 (GPU has fallen off the bus) in the kernel log since boot: {log.splitlines()[1]}",
        f"GPU at PCI 0000:5e:00: Xid 13 (graphics engine exception) in the kernel log since boot: {log.splitlines()[2]}",
        f"GPU0: Xid 999 (see NVIDIA's Xid catalogue) in the kernel log since boot: {log.splitlines()[3]}",
    ]
    after = gpu_facts.xid_failures(events, gpus, 100.5, [999])  # stamped at the deploy itself: counted
    assert [f.split(": NVRM")[0].split("] ")[0] for f in after] == [
        "GPU0: Xid 79 (GPU has fallen off the bus) in the kernel log since the last good deploy: [  100.500000",
        "GPU at PCI 0000:5e:00: Xid 13 (graphics engine exception) in the kernel log since the last good deploy",
    ]
    assert gpu_facts.xid_failures(events, gpus, 100.6, [13, 999]) == []
    assert len(gpu_facts.parse_xid("x" * 400 + " NVRM: Xid (PCI:0000:00:06): 79, y")[0]["line"]) == 300


def test_the_last_good_deploy_is_placed_in_seconds_since_boot() -> None:
    # booted at 999,600 (now 1,000,600, up 1,000 s): a record written at 1,000,000 is 400 s after boot
    assert gpu_facts.after_boot(1_000_000.0, now=1_000_600.0, uptime_s=1_000.0) == 400.0
    assert gpu_facts.after_boot(1_000_000.0, now=1_000_600.0, uptime_s=10.0) == 0.0  # written before this boot
    assert gpu_facts.after_boot(None, now=1.0, uptime_s=1.0) is None


def test_an_unreadable_kernel_log_names_the_command_and_the_fix() -> None:
    assert gpu_facts.kernel_log_unreadable(["dmesg", "-T"], 1, "  dmesg: read kernel buffer failed: Operation not permitted\n") == (
        "cannot read the kernel log for Xid events (dmesg -T: rc 1, dmesg: read kernel buffer failed: Operation not "
        "permitted): run with become, or set gpu_host_check_xid: false"
    )


def test_edges_a_section_line_with_an_empty_value_an_ignored_code_first_and_a_long_kernel_log_error() -> None:
    log = gpu_facts.parse_q("GPU 00000000:3B:00.0\n    Remapped Rows :\n        Pending : Yes\n")
    assert log.gpus == {"00000000:3b:00.0": {"Remapped Rows/Pending": "Yes"}}
    events = gpu_facts.parse_xid(
        "[ 1.0] NVRM: Xid (PCI:0000:00:06): 79, a\n[ 2.0] NVRM: Xid (PCI:0000:00:06): 13, b\n"
    )
    assert gpu_facts.xid_failures(events, [], None, [79]) == [
        "GPU at PCI 0000:00:06: Xid 13 (graphics engine exception) in the kernel log since boot: [ 2.0] NVRM: Xid "
        "(PCI:0000:00:06): 13, b"
    ]
    said = gpu_facts.kernel_log_unreadable(["dmesg"], 1, "z" * 300)
    assert "z" * 200 in said and "z" * 201 not in said
