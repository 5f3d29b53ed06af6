"""gpu_host's dockerd settings (tasks_from daemon, docker_restart) on a daemon.json in a temp folder:
keys the role does not manage are kept, the nvidia runtime is what nvidia-ctk writes, live-restore
(reloadable on SIGHUP) never asks for a restart, log rotation (read only at start) leaves a restart
pending on the host until the rollout's restart step ran, and --check writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from roles_testlib import docker_ok, run_role_tasks


def _vars(tmp_path: Path, **over: object) -> dict[str, object]:
    return {
        "ansible_python_interpreter": "/usr/bin/python3",
        "gpu_host_docker_daemon_json": str(tmp_path / "daemon.json"),
        "gpu_host_state_dir": str(tmp_path / "state"),
        "gpu_host_docker_service": "",
        **over,
    }


def _pending(tmp_path: Path) -> list[str] | None:
    path = tmp_path / "state" / "docker-restart-pending.json"
    return json.loads(path.read_text())["settings"] if path.exists() else None


def test_merge_keeps_foreign_keys_and_leaves_the_log_settings_pending(tmp_path: Path) -> None:
    (tmp_path / "daemon.json").write_text(
        json.dumps({"data-root": "/srv/docker", "runtimes": {"crun": {"path": "/usr/bin/crun"}}, "live-restore": False})
    )
    run = run_role_tasks(tmp_path, "gpu_host", "daemon", _vars(tmp_path))
    assert run.rc == 0, run.out[-3000:]
    got = json.loads((tmp_path / "daemon.json").read_text())
    assert got == {
        "data-root": "/srv/docker",
        "live-restore": True,
        "log-driver": "json-file",
        "log-opts": {"max-file": "5", "max-size": "100m"},
        "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }
    assert _pending(tmp_path) == ["log-driver", "log-opts"]
    flat = " ".join(run.out.split())
    assert "log-driver, log-opts in " in flat and "take effect only when dockerd restarts" in flat
    # no service to reload here: said so, with what to run
    assert "but dockerd was not reloaded (gpu_host_docker_service is empty)" in flat

    again = run_role_tasks(tmp_path, "gpu_host", "daemon", _vars(tmp_path))
    assert again.rc == 0 and again.changed() == 0, again.out[-3000:]
    # a later run that changes nothing still knows the restart has not happened
    assert _pending(tmp_path) == ["log-driver", "log-opts"]
    assert "take effect only when dockerd restarts" in " ".join(again.out.split())


def test_reloadable_changes_ask_for_no_restart(tmp_path: Path) -> None:
    (tmp_path / "daemon.json").write_text(
        json.dumps({"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "5"}})
    )
    run = run_role_tasks(tmp_path, "gpu_host", "daemon", _vars(tmp_path))
    assert run.rc == 0, run.out[-3000:]
    got = json.loads((tmp_path / "daemon.json").read_text())
    assert got["live-restore"] is True and got["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert _pending(tmp_path) is None
    assert "take effect only when dockerd restarts" not in run.out


def test_log_driver_left_alone_when_empty(tmp_path: Path) -> None:
    (tmp_path / "daemon.json").write_text(json.dumps({"log-driver": "journald", "live-restore": True}))
    run = run_role_tasks(
        tmp_path, "gpu_host", "daemon", _vars(tmp_path, gpu_host_docker_log_driver="", gpu_host_install_toolkit=False)
    )
    assert run.rc == 0 and run.changed() == 0, run.out[-3000:]
    assert json.loads((tmp_path / "daemon.json").read_text()) == {"log-driver": "journald", "live-restore": True}
    assert _pending(tmp_path) is None


def test_check_mode_shows_the_file_and_writes_nothing(tmp_path: Path) -> None:
    run = run_role_tasks(tmp_path, "gpu_host", "daemon", _vars(tmp_path), "--check", "--diff")
    assert run.rc == 0, run.out[-3000:]
    assert not (tmp_path / "daemon.json").exists() and _pending(tmp_path) is None
    assert '+    "live-restore": true,' in run.out and '+    "log-driver": "json-file",' in run.out


@pytest.mark.docker
@pytest.mark.skipif(not docker_ok(), reason="no docker engine")
def test_restart_step_runs_the_restart_and_clears_the_pending_record(tmp_path: Path) -> None:
    (tmp_path / "daemon.json").write_text("{}")
    assert run_role_tasks(tmp_path, "gpu_host", "daemon", _vars(tmp_path)).rc == 0
    assert _pending(tmp_path) == ["log-driver", "log-opts"]
    log = tmp_path / "restarts.log"
    cmd = ["sh", "-c", 'echo restarted >> "$0"', str(log)]
    run = run_role_tasks(tmp_path, "gpu_host", "docker_restart", _vars(tmp_path, gpu_host_docker_restart_command=cmd))
    assert run.rc == 0, run.out[-3000:]
    assert log.read_text() == "restarted\n" and _pending(tmp_path) is None
    # nothing to restart with: nothing restarted, the record stays
    assert (
        run_role_tasks(tmp_path, "gpu_host", "daemon", _vars(tmp_path, gpu_host_docker_log_opts={"max-size": "1g"})).rc
        == 0
    )
    kept = run_role_tasks(tmp_path, "gpu_host", "docker_restart", _vars(tmp_path))
    assert kept.rc == 0 and _pending(tmp_path) == ["log-opts"]
    assert "dockerd was not restarted" in " ".join(kept.out.split())
