"""Helpers for the molecule testinfra suites.

The server containers are siblings of the molecule instances on the machine's Docker
engine; each instance has the docker CLI and the engine's socket, so `host.run("docker
...")` inspects what the roles started *from the host's point of view*. Gate reports and
rollout summaries live on the controller (this process), under the scenario's ephemeral
directory.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def inventory_name(host: Any) -> str:
    """The instance's inventory hostname (the molecule platform name)."""
    return host.backend.get_hostname()


def container(host: Any, name: str) -> dict[str, Any]:
    """`docker inspect` of a container, or a failing assertion with the docker error."""
    result = host.run("docker inspect %s", name)
    assert result.rc == 0, f"docker inspect {name}: {result.stderr}"
    return json.loads(result.stdout)[0]


def container_logs(host: Any, name: str, tail: int = 80) -> str:
    """The last log lines of a container, printed into assertion messages on failure."""
    result = host.run("docker logs --tail %s %s", str(tail), name)
    return result.stdout + result.stderr


def image_ref(host: Any, image_id: str) -> list[str]:
    """Repo tags of an image id, as the host's daemon knows them."""
    info = json.loads(host.check_output("docker image inspect %s", image_id))[0]
    return info.get("RepoTags") or []


def reports_dir() -> Path:
    return Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"


def gate_reports(host_name: str) -> list[dict[str, Any]]:
    """Every gate report.json stored on the controller for a host, oldest first."""
    base = reports_dir() / host_name
    files = sorted(base.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    return [json.loads(p.read_text()) for p in files]


def rollout_summaries() -> list[dict[str, Any]]:
    """Every rollout-summary.json on the controller, oldest first."""
    files = sorted(reports_dir().glob("*/rollout-summary.json"), key=lambda p: p.stat().st_mtime)
    return [json.loads(p.read_text()) for p in files]


def flashinfer_mount(inspect: dict[str, Any]) -> dict[str, Any]:
    mounts = [m for m in inspect["Mounts"] if m.get("Destination") == "/root/.cache/flashinfer"]
    assert mounts, f"no mount at /root/.cache/flashinfer: {inspect['Mounts']}"
    return mounts[0]


def ephemeral() -> Path:
    return Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])


def nested_log(label: str) -> str:
    """The output of a nested deploy.yml run (molecule/resources/nested_deploy.yml)."""
    return (ephemeral() / f"{label}.log").read_text()


def summary_after(label: str) -> dict[str, Any]:
    """The rollout summary a nested run wrote: the first one written after it started
    (a scenario's nested runs follow one another)."""
    text = (ephemeral() / f"{label}.started").read_text().strip().rstrip("Z")
    started = datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    files = sorted(reports_dir().glob("*/rollout-summary.json"), key=lambda p: p.stat().st_mtime)
    after = [p for p in files if p.stat().st_mtime > started]
    assert after, f"no rollout summary written after {label} started ({text})"
    return json.loads(after[0].read_text())
