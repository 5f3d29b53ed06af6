"""Each role's README carries a Role Variables table generated from its meta/argument_specs.yml
(scripts/role_docs.py); a README whose table is not what the script writes fails here."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from roles_testlib import REPO, ROLE_NAMES, ROLES

SPEC = importlib.util.spec_from_file_location("role_docs", REPO / "scripts" / "role_docs.py")
assert SPEC and SPEC.loader
role_docs = importlib.util.module_from_spec(SPEC)
sys.modules["role_docs"] = role_docs
SPEC.loader.exec_module(role_docs)


def test_every_role_readme_has_its_current_table():
    assert [str(p.relative_to(REPO)) for p in role_docs.stale(ROLES)] == []


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_the_table_lists_every_option_of_the_spec_once(role: str):
    import yaml

    text = (ROLES / role / "README.md").read_text()
    block = text.split(role_docs.BEGIN, 1)[1].split(role_docs.END, 1)[0]
    spec = yaml.safe_load((ROLES / role / "meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    names = [line.split("|")[1].strip().strip("`") for line in block.splitlines() if line.startswith("| `")]
    assert names == list(options)


def test_a_row_shows_default_choices_and_description():
    text = (ROLES / "sglang_gate" / "README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `sglang_gate_location` |"))
    assert row.split(" | ")[1:3] == ["`host`", "`host`, `controller`"]
    assert "Where the gate runs" in row and row.endswith("(str) |")
    # a Jinja default keeps its pipes escaped, so the table keeps its columns
    row = next(line for line in text.splitlines() if line.startswith("| `sglang_gate_api_key` |"))
    assert row.split(" | ")[1] == "`{{ sglang_server_api_key \\| default('') }}`"
    row = next(line for line in text.splitlines() if line.startswith("| `sglang_gate_config` |"))
    assert row.split(" | ")[1] == "required"


def test_a_changed_spec_makes_the_readme_stale_and_the_script_fixes_only_the_table(tmp_path: Path):
    role = tmp_path / "roles" / "sglang_gate"
    (role / "meta").mkdir(parents=True)
    shutil.copy(ROLES / "sglang_gate/meta/argument_specs.yml", role / "meta/argument_specs.yml")
    shutil.copy(ROLES / "sglang_gate/README.md", role / "README.md")
    readme = (role / "README.md").read_text()
    assert role_docs.stale(tmp_path / "roles") == {}
    spec = (role / "meta/argument_specs.yml").read_text()
    poll = "sglang_gate_poll_s: {type: int, default: "
    assert f"{poll}30," in spec
    (role / "meta/argument_specs.yml").write_text(spec.replace(f"{poll}30,", f"{poll}25,", 1))
    assert role_docs.main(["--check", "--roles", str(tmp_path / "roles")]) == 1
    assert role_docs.main(["--roles", str(tmp_path / "roles")]) == 0
    fixed = (role / "README.md").read_text()
    assert "| `sglang_gate_poll_s` | `25` |" in fixed and "| `sglang_gate_poll_s` | `30` |" in readme
    # the README's own text, before and after the markers, is untouched
    head = readme.split(role_docs.BEGIN)[0]
    assert fixed.startswith(head) and fixed.endswith(readme.split(role_docs.END)[1])
    assert role_docs.stale(tmp_path / "roles") == {}
