"""Every role's defaults/ and meta/argument_specs.yml must describe the same variables.

The spec is what `ansible-doc`-style readers and the role's own argument validation use;
defaults/ is what actually applies. When they drift, a variable is either unvalidated or
documented but dead, so this check fails on any difference (and on obvious type mismatches).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from roles_testlib import ROLE_NAMES, ROLES, load_yaml

SPEC_TYPES = {
    bool: {"bool"},
    int: {"int", "float"},
    float: {"float"},
    list: {"list"},
    dict: {"dict"},
    str: {"str", "path", "raw", "int", "float", "bool", "list", "dict"},  # a template may render any type
}


def spec_problems(role_dir: Path) -> list[str]:
    """Differences between defaults/main.yml and every entry point of meta/argument_specs.yml."""
    defaults = load_yaml(role_dir / "defaults" / "main.yml") or {}
    specs = (load_yaml(role_dir / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}
    problems: list[str] = []
    if "main" not in specs:
        problems.append(f"{role_dir.name}: argument_specs has no 'main' entry point")
    for entry, spec in specs.items():
        options = (spec or {}).get("options") or {}
        for name in sorted(set(defaults) - set(options)):
            problems.append(f"{role_dir.name}:{entry}: {name} is in defaults/ but not in the spec")
        for name in sorted(set(options) - set(defaults)):
            problems.append(f"{role_dir.name}:{entry}: {name} is in the spec but not in defaults/")
        for name in sorted(set(options) & set(defaults)):
            value, declared = defaults[name], options[name].get("type", "str")
            # the spec's default is what the README's table shows (scripts/role_docs.py): the same value
            in_spec = options[name].get("default", "(none)")
            if not options[name].get("required") and in_spec != value:
                where = f"{role_dir.name}:{entry}: {name}"
                problems.append(f"{where} spec default {in_spec!r} is not defaults/main.yml's {value!r}")
            templated = isinstance(value, str) and "{{" in value
            if value is None or templated:
                continue
            allowed = SPEC_TYPES.get(type(value), {declared})
            if declared not in allowed:
                problems.append(f"{role_dir.name}:{entry}: {name} default {value!r} does not fit type {declared}")
            choices = options[name].get("choices")
            if choices is not None and value not in choices:
                problems.append(f"{role_dir.name}:{entry}: {name} default {value!r} is not one of {choices}")
    return problems


def undocumented(role_dir: Path) -> list[str]:
    """Top-level variables of defaults/main.yml without a comment in the block above them."""
    missing, block_has_comment = [], False
    for line in (role_dir / "defaults" / "main.yml").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.strip() == "---":
            block_has_comment = False
        elif line.startswith("#"):
            block_has_comment = True
        elif line[0].isalpha() and ":" in line and not block_has_comment:
            missing.append(line.split(":", 1)[0])
    return missing


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_defaults_match_argument_specs(role: str) -> None:
    assert spec_problems(ROLES / role) == []


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_default_is_documented_and_prefixed(role: str) -> None:
    assert undocumented(ROLES / role) == []
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml")
    assert [n for n in defaults if not n.startswith(role + "_")] == []


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_role_has_meta(role: str) -> None:
    meta = load_yaml(ROLES / role / "meta" / "main.yml")
    assert meta["galaxy_info"]["role_name"] == role


def test_checker_catches_drift(tmp_path: Path) -> None:
    """The consistency check itself must fail on a role whose spec and defaults disagree."""
    role = tmp_path / "drift"
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text("---\n# doc\ndrift_a: 1\ndrift_b: true\ndrift_d: x\n")
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      drift_a: {type: bool, default: 1}\n      drift_c: {type: str}\n"
        "      drift_d: {type: str, default: y}\n"
    )
    problems = spec_problems(role)
    assert any("drift_d spec default 'y' is not defaults/main.yml's 'x'" in p for p in problems)
    assert any("drift_b is in defaults/ but not in the spec" in p for p in problems)
    assert any("drift_c is in the spec but not in defaults/" in p for p in problems)
    assert any("drift_a default 1 does not fit type bool" in p for p in problems)
    (role / "defaults" / "main.yml").write_text("---\ndrift_a: 1\n")
    assert undocumented(role) == ["drift_a"]
