"""ansible-playbook run from a Python that has Ansible but not the bundle's packages (an operator's
system or pipx Ansible, the virtualenv not activated) stops with one line that says what to do, not
with "Unexpected Exception, this is probably a bug" and a traceback.

The interpreter is real: a fresh virtualenv of the same Python whose only addition is a .pth line
naming the site-packages folder that holds ansible-core. Python reads no .pth file inside a folder
added that way, so the bundle's editable install (a .pth finder there) is not loaded: `import
ansible` works, `import preflight` does not. It runs the real .venv ansible-playbook script.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ansible
from roles_testlib import BIN, REPO, ansible_env


def _python_without_bundle(tmp: Path) -> Path:
    venv = tmp / "ansible-only"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "ansible-only.pth").write_text(str(Path(ansible.__file__).resolve().parents[1]) + "\n")
    return venv / "bin" / "python"


def test_a_controller_python_without_the_bundle_gets_one_line_naming_the_fix(tmp_path):
    python = _python_without_bundle(tmp_path)
    env = {k: v for k, v in ansible_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    probe = subprocess.run([str(python), "-c", "import ansible; import preflight"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert "No module named 'preflight'" in probe.stderr, probe.stderr  # the setup this test is about

    reports = tmp_path / "reports"
    run = subprocess.run(
        [str(python), str(BIN / "ansible-playbook"), "-i", "inventory/local", "deploy.yml",
         "-e", f"sglang_reports_dir={reports}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("[ERROR]")]
    assert errors == [
        "[ERROR]: ansible-playbook runs on a Python without the bundle's packages (No module named 'preflight'): "
        "activate the bundle's virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ], out[-3000:]
    assert "Traceback" not in out and "probably a bug" not in out, out[-3000:]
    assert not reports.exists() or not any(reports.rglob("*.json"))  # stopped at preflight's first task
