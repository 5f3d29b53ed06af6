"""dashboards/sglang-rollout.json: every query names metrics and labels the writers really emit
(validate/textfile.py on the hosts, rolloutreport/metrics.py on the controller), and every query
is PromQL that Prometheus' own parser accepts (promtool check rules)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from rolloutreport import metrics as fleet
from validate import textfile

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "dashboards" / "sglang-rollout.json"
SCRAPE_LABELS = {"instance", "job"}  # added by Prometheus when it scrapes node_exporter
NAME = re.compile(r"\bsglang_[a-z0-9_]+\b")


def emitted() -> dict[str, set[str]]:
    """Every sample name the two writers produce, with its label names."""
    gate = textfile.GateMetrics(
        passed=True, checks={"readiness": True, "logs.crash_signatures": False},
        figures={metric: 1.0 for metric, _, _ in textfile.FIGURES.values()}, duration_s=1.0, finished_at=1.0,
        labels={"image": "i", "model": "m", "profile": "p", "engine": "sglang"},
    )  # fmt: skip
    summary = {"run_id": "r", "hosts": [], "finished": True}
    state = {"hosts": {"h1": {"outcome": "ok", "drained": True, "pending_repair": True}}}
    out: dict[str, set[str]] = {}
    registries: list[CollectorRegistry] = [textfile.registry(gate), fleet.registry(summary, state)]
    for reg in registries:
        for family in reg.collect():
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
    return out


def targets() -> list[dict]:
    dash = json.loads(DASHBOARD.read_text())
    return [t for p in dash["panels"] for t in p.get("targets", [])]


def test_every_query_names_emitted_metrics_and_labels() -> None:
    known = emitted()
    assert len(targets()) >= 12
    for target in targets():
        expr, legend = target["expr"], target.get("legendFormat", "")
        names = NAME.findall(expr)
        assert names, expr
        labels = set().union(*(known.get(n, set()) for n in names)) | SCRAPE_LABELS
        assert [n for n in names if n not in known] == [], expr
        matchers = re.findall(r"([a-z_]+)\s*=~?", "".join(re.findall(r"\{([^}]*)\}", expr)))
        assert set(matchers) <= labels, (expr, matchers)
        assert set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend)) <= labels, (expr, legend)


def test_the_profile_variable_reads_a_label_the_gate_writes() -> None:
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    query = next(v for v in variables if v["name"] == "profile")["definition"]
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", query).groups()
    assert label in emitted()[metric]


def test_every_query_parses_as_promql(tmp_path: Path, promtool_bin: str) -> None:
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": t["expr"].replace("$profile", ".*")} for i, t in enumerate(targets())
    ]}]}  # fmt: skip
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    run = subprocess.run([promtool_bin, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(targets())} rules found" in run.stdout
