"""molecule/default verify: what one converged GPU-host stand-in must look like."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))
import helpers


def _server(host):
    name = f"mol-sglang-{helpers.inventory_name(host)}"
    return name, helpers.container(host, name)


def test_server_running_with_fleet_command_line(host):
    name, info = _server(host)
    assert info["State"]["Running"], helpers.container_logs(host, name)
    args = info["Args"]
    pairs = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert pairs.get("--model-path") == "zai-org/GLM-5-NVFP4"
    assert pairs.get("--tp-size") == "8"
    assert pairs.get("--kv-cache-dtype") == "fp8_e4m3"
    assert pairs.get("--quantization") == "modelopt_fp4"
    assert pairs.get("--moe-runner-backend") == "flashinfer_cutlass"
    assert pairs.get("--max-running-requests") == "1024"
    assert "--enable-metrics" in args
    # release-a carries the DSA guard (patch record: applied), so the radix cache stays on.
    assert "--disable-radix-cache" not in args


def test_image_is_the_requested_release(host):
    _, info = _server(host)
    assert "local/sglang-test-engine:release-a" in helpers.image_ref(host, info["Image"])


def test_flashinfer_cache_is_a_keyed_volume(host):
    _, info = _server(host)
    mount = helpers.flashinfer_mount(info)
    assert mount["Type"] == "volume"
    # key: FlashInfer 0.6.3, CUDA 12.9, sm_120 (release-a's labels + inventory arch)
    assert mount["Name"].startswith(f"mol-fic-{helpers.inventory_name(host)}-")
    assert "fi0.6.3" in mount["Name"] and "cu12.9" in mount["Name"] and "sm120" in mount["Name"]
    env = dict(e.split("=", 1) for e in info["Config"]["Env"])
    assert env["SGLANG_CACHE_DIR"].startswith("/root/.cache/flashinfer/")


def test_server_answers_health_from_the_host(host):
    name, _ = _server(host)
    # through the instance's own view of the daemon: the container's health as docker sees it,
    # and the HTTP endpoint itself from inside the server container
    check = (
        "import sys, urllib.request; "
        "sys.exit(urllib.request.urlopen('http://127.0.0.1:31101/health', timeout=5).status != 200)"
    )
    probe = host.run("docker exec %s python3 -c %s", name, check)
    assert probe.rc == 0, probe.stderr + helpers.container_logs(host, name)


def test_gate_report_present_and_passing(host):
    reports = helpers.gate_reports(helpers.inventory_name(host))
    assert reports, f"no gate report under {helpers.reports_dir()}"
    last = reports[-1]
    assert last["verdict"] == "pass", [c for c in last["checks"] if not c["passed"]]
    assert last["engine"] == "test-engine"


def test_check_run_on_the_fresh_host_showed_the_change_and_started_nothing(host):
    """prepare ran `deploy.yml --check --diff` before converge (nothing started: checked there)."""
    log = (helpers.reports_dir().parent / "check-fresh.log").read_text()
    me = helpers.inventory_name(host)
    assert f"TASK [flashinfer_cache : Create the cache volume mol-fic-{me}-fi0.6.3-" in log, log[-3000:]
    run = log.index("TASK [sglang_server : Run the serving container from local/sglang-test-engine:release-a]")
    assert "-    exists: false\n+    exists: true" in log[run : run + 400]
    flat = " ".join(log.split())  # the summary table wraps long cells
    assert "(check mode: nothing changed)" in flat and "check mode: the gate only runs on a real deploy" in flat
    assert f"{me}" in log and "failed=0" in log and "unreachable=0" in log
