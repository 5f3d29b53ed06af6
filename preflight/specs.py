"""Every variable's type, choices and default, from where they are written once: each role's
``meta/argument_specs.yml`` and ``defaults/main.yml``, and ``preflight/variables.yml`` for the
rollout's own variables (shared by the plays, no one role's).

Why: preflight reads some of those variables on the controller, before any role runs (a role's
defaults only exist inside the role). Rather than restate their types and defaults here, it
validates what it reads against those specs with Ansible's own argument-spec validator (the one
``validate_argument_spec`` and every role's entry point use), so a value preflight reads is
checked, coerced and defaulted the way the role will check it, and an error names the variable.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

VARIABLES = Path(__file__).resolve().parent / "variables.yml"
# libyaml's loader where PyYAML has it
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER) or {}


# set by the rollout's own plays while they run, not settings: never part of a host's settings set
RUN_STATE = frozenset(_load(VARIABLES)["run_state"])


# what a role's own validation enforces (required), or documents: not what a value read here may hold
_NOT_CHECKED = ("description", "required", "version_added")


def _templated(value: Any) -> bool:
    """A role default that Ansible templates (``"{{ sglang_gpu_count | default(8) }}"``): only the
    role can resolve it, so it is no default here."""
    return isinstance(value, str) and "{{" in value


@dataclass(frozen=True)
class Specs:
    """The argument spec of every variable (the roles' ``main`` entry points and the rollout's own)
    and the plain defaults (those that need no templating)."""

    options: Mapping[str, Mapping[str, Any]]
    defaults: Mapping[str, Any]
    role_variables: frozenset[str]  # every name a role's defaults/main.yml defines
    ours: frozenset[str]  # the rollout's own settings (preflight/variables.yml)
    run_state: frozenset[str]  # set by the rollout's plays while they run, not settings

    @property
    def known(self) -> frozenset[str]:
        """Every variable something of the bundle reads."""
        return frozenset(self.options) | self.role_variables | self.run_state

    def typed(self, hv: Mapping[str, Any], names: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
        """``names`` read from a host's variables (unset or empty: the default), validated and coerced
        against their specs; an invalid one takes its default, and its error (naming the variable and
        what it may hold) is returned."""
        spec: dict[str, dict[str, Any]] = {}
        given: dict[str, Any] = {}
        for name in names:
            spec[name] = {k: v for k, v in (self.options.get(name) or {"type": "raw"}).items() if k not in _NOT_CHECKED}
            if name in self.defaults:
                spec[name]["default"] = self.defaults[name]
            value = hv.get(name)
            if value is not None and value != "":
                given[name] = value
        result = ArgumentSpecValidator(spec).validate(given)
        if not result.error_messages:
            return dict(result.validated_parameters), []
        values: dict[str, Any] = {}
        errors: list[str] = []
        for name in spec:  # which ones: each alone, an invalid one read as its default
            one = ArgumentSpecValidator({name: spec[name]}).validate({k: v for k, v in given.items() if k == name})
            errors += one.error_messages
            if one.error_messages:
                one = ArgumentSpecValidator({name: spec[name]}).validate({})
            values[name] = one.validated_parameters.get(name)
        return values, errors


def role_options(specs_file: Path, entry: str = "main") -> dict[str, dict[str, Any]]:
    """An entry point's options, without the defaults a role templates: a spec states them for the docs
    (the README tables), and only the role can resolve them; Ansible's validator would read
    ``"{{ sglang_gpu_count | default(8) }}"`` as a value."""
    options = _load(specs_file)["argument_specs"][entry].get("options") or {}
    return {name: {k: v for k, v in o.items() if not (k == "default" and _templated(v))} for name, o in options.items()}


@functools.lru_cache(maxsize=8)
def load(roles_dir: Path, variables: Path = VARIABLES) -> Specs:
    """The specs of the roles under ``roles_dir`` and of the rollout's own variables."""
    ours = _load(variables)
    options: dict[str, Mapping[str, Any]] = {**ours.get("settings", {})}
    defaults = {name: spec["default"] for name, spec in options.items() if "default" in spec}
    role_variables: set[str] = set()
    for role in sorted(p for p in Path(roles_dir).iterdir() if (p / "defaults" / "main.yml").is_file()):
        role_defaults = _load(role / "defaults" / "main.yml")
        role_variables.update(role_defaults)
        defaults.update({k: v for k, v in role_defaults.items() if not _templated(v)})
        specs = role / "meta" / "argument_specs.yml"
        if specs.is_file():
            options.update(role_options(specs))
    settings = frozenset(ours.get("settings", {}))
    return Specs(options, defaults, frozenset(role_variables), settings, frozenset(ours["run_state"]))
