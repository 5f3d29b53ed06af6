"""Versioned SGLang flag tables read from the released wheels (AST only: no torch, no import).

Why: the roles render ``launch_server`` flags per SGLang version and the test engine
must refuse what a release refuses. Guessing which flag or value a release accepts
went wrong more than once (docs/blackwell-profiles.md, "Flag tables": renames and removals by
release), so the tables are read from each release's
own ``sglang/srt/server_args.py``, committed under ``sglangflags/tables/`` (the package every
reader imports), and CI
checks that this tool still reproduces them from the wheels.

Two generations of argument definitions are read:
- ``parser.add_argument("--flag", ..., choices=..., action=...)`` calls (all releases,
  and the deprecated aliases of the newer ones);
- dataclass fields ``name: A[type, Arg(choices=..., aliases=..., cli_name=...)] = default``
  or ``A[type, "help"]`` (the newer releases' ``add_cli_args_from_dataclass``), with
  ``Literal[...]`` types giving choices and ``bool`` giving a switch.
Choices are resolved from list literals, module constants, ``+`` of those, and the
parser registries (``ReasoningParser.DetectorMap``, ``FunctionCallParser.ToolCallParserEnum``)
by their dict keys. What cannot be resolved statically is recorded as ``"dynamic"``.

Usage::

    python3 images/flags/extract.py 0.5.9 0.5.23 ...      # write tables/sglang-<v>.json
    python3 images/flags/extract.py --check                # CI: every committed table reproduces
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TABLES = HERE.parents[1] / "sglangflags" / "tables"
sys.path.insert(0, str(HERE.parent))

# The releases the bundle deploys (README: 0.5.9 .. 0.5.23, every PyPI release in between).
SUPPORTED = [
    *("0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14"),
    *("0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
]

SWITCH_ACTIONS = {
    "store_true",
    "store_false",
    "DeprecatedStoreTrueAction",
    "DeprecatedAction",
    "store_const",
    "BooleanOptionalAction",
    "DeprecatedStoreConstAction",
}
# argparse.BooleanOptionalAction: ``--flag`` and ``--no-flag``, neither takes a value (0.5.2x fields).
NEGATABLE = "BooleanOptionalAction"
# The classes environ.py declares its switches with (``NAME = EnvBool(default)``), and their kinds.
ENV_KINDS = {
    "EnvBool": "bool",
    "EnvInt": "int",
    "EnvFloat": "float",
    "EnvStr": "str",
    "EnvTuple": "tuple",
    "EnvJSON": "json",
    "EnvBoolWithAlias": "bool",
    "EnvIntWithAlias": "int",
    "EnvStrWithAlias": "str",
}
REGISTRIES = ("DetectorMap", "ToolCallParserEnum")
DYNAMIC = "dynamic"


class _Module:
    """The argument sources of a release: their constants and name assignments, for resolving ``choices``."""

    def __init__(self, trees: list[ast.Module], registries: dict[str, list[str]]) -> None:
        self.assigns: dict[str, ast.expr] = {}
        self.returns: dict[str, ast.expr] = {}  # function name -> its last return value
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self.assigns.setdefault(node.targets[0].id, node.value)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    self.assigns.setdefault(node.target.id, node.value)
                elif isinstance(node, ast.FunctionDef):
                    rets = [r for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
                    if rets:
                        self.returns.setdefault(node.name, rets[-1].value)
        self.registries = registries

    def resolve(self, expr: ast.expr | None, depth: int = 0) -> list[Any] | str | None:
        if expr is None:
            return None
        if depth > 8:
            return DYNAMIC
        if isinstance(expr, ast.List | ast.Tuple | ast.Set):
            out: list[Any] = []
            for e in expr.elts:
                if isinstance(e, ast.Constant):
                    out.append(e.value)
                elif isinstance(e, ast.Starred):
                    inner = self.resolve(e.value, depth + 1)
                    if not isinstance(inner, list):
                        return DYNAMIC
                    out += inner
                else:
                    return DYNAMIC
            return out
        if isinstance(expr, ast.Name):
            return self.resolve(self.assigns[expr.id], depth + 1) if expr.id in self.assigns else DYNAMIC
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.resolve(expr.left, depth + 1), self.resolve(expr.right, depth + 1)
            return left + right if isinstance(left, list) and isinstance(right, list) else DYNAMIC
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "sorted"):
            return self.resolve(expr.args[0], depth + 1) if expr.args else DYNAMIC
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in self.returns:
            return self.resolve(self.returns[expr.func.id], depth + 1)  # e.g. _tool_call_parser_choices()
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "keys":
            return self.resolve(expr.func.value, depth + 1)
        if isinstance(expr, ast.Attribute) and expr.attr in self.registries:
            return list(self.registries[expr.attr])
        return DYNAMIC


def _registries(zf: zipfile.ZipFile) -> dict[str, list[str]]:
    """Keys of the parser registries (class attributes holding dict literals) anywhere in sglang/srt."""
    found: dict[str, list[str]] = {}
    for name in zf.namelist():
        if not name.startswith("sglang/srt/") or not name.endswith(("reasoning_parser.py", "function_call_parser.py")):
            continue
        tree = ast.parse(zf.read(name))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id in REGISTRIES:
                        keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
                        found[t.id] = sorted(set(found.get(t.id, [])) | set(keys))
    return found


def _deprecated_values(zf: zipfile.ZipFile) -> dict[str, dict[str, str]]:
    """``deprecated_tool_call_parsers = {old: new}`` wherever the release keeps it."""
    out: dict[str, dict[str, str]] = {}
    for name in zf.namelist():
        if not (name.startswith("sglang/srt/") and name.endswith(".py")):
            continue
        data = zf.read(name)
        if b"deprecated_tool_call_parsers" not in data:
            continue
        for node in ast.walk(ast.parse(data)):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "deprecated_tool_call_parsers"
                and isinstance(node.value, ast.Dict)
            ):
                out["--tool-call-parser"] = {
                    k.value: v.value
                    for k, v in zip(node.value.keys, node.value.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
                }
    return out


def _kw(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg}


def _const(expr: ast.expr | None) -> Any:
    return expr.value if isinstance(expr, ast.Constant) else None


def _action_name(expr: ast.expr | None) -> str:
    if isinstance(expr, ast.Constant):
        return str(expr.value)
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return ""


def _entry(takes_value: bool, choices: Any, deprecated: bool, dest: str, new_flag: str | None) -> dict[str, Any]:
    e: dict[str, Any] = {"value": takes_value, "dest": dest}
    if choices is not None:
        e["choices"] = choices
    if deprecated:
        e["deprecated"] = True
    if new_flag:
        e["new_flag"] = new_flag
    return e


def _help_text(expr: ast.expr | None) -> str:
    """A help string, also when written as implicitly joined or ``+``-joined literals."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _help_text(expr.left) + _help_text(expr.right)
    if isinstance(expr, ast.JoinedStr):
        return "".join(str(v.value) for v in expr.values if isinstance(v, ast.Constant))
    return str(_const(expr) or "").lower()


# The flag itself is deprecated: "[Deprecated] Use --x", "(Deprecated: use --x=auto) ...", "Deprecated. ...",
# "Note: --x is deprecated now". Not: "Replaces the deprecated --grpc-mode" or "replaces the deprecated
# environment variable" (0.5.9's --fp4-gemm-backend), which name something else as deprecated.
_DEPRECATED_HELP = re.compile(r"^\W*deprecated\b|\b(is|are) (now )?deprecated\b")


def _is_deprecated(action: str, helptext: str) -> bool:
    return "Deprecated" in action or bool(_DEPRECATED_HELP.search(helptext))


def _new_flag_in(helptext: str) -> str | None:
    """'(deprecated: use --flashinfer-allreduce-fusion-backend=auto)' -> that flag (with its value)."""
    m = re.search(r"deprecated[^a-z]*use (--[a-z0-9-]+(?:=[a-z0-9_]+)?)", helptext)
    return m.group(1) if m else None


def _from_add_argument(mod: _Module, tree: ast.Module, flags: dict[str, dict[str, Any]]) -> None:
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        ):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        if not names:
            continue
        kw = _kw(node)
        action = _action_name(kw.get("action"))
        helptext = _help_text(kw.get("help"))
        deprecated = _is_deprecated(action, helptext)
        dest = _const(kw.get("dest")) or names[0].lstrip("-").replace("-", "_")
        # An explicit nargs wins over the action's usual arity (0.5.23's --monokernel-backend is a
        # DeprecatedStoreConstAction with nargs=None and choices: it takes a value).
        takes_value = _const(kw["nargs"]) != 0 if "nargs" in kw else action not in SWITCH_ACTIONS
        entry = _entry(
            takes_value,
            mod.resolve(kw.get("choices")),
            deprecated,
            dest,
            _const(kw.get("new_flag")) or _new_flag_in(helptext),
        )
        for n in names:
            flags[n] = entry
        if action == NEGATABLE:
            _add_negations(names, entry, flags)


def _add_negations(names: list[str], entry: dict[str, Any], flags: dict[str, dict[str, Any]]) -> None:
    """``--no-<flag>`` for each ``--<flag>`` of a BooleanOptionalAction (argparse adds them itself)."""
    for n in names:
        if n.startswith("--"):
            flags.setdefault("--no-" + n[2:], {**entry, "negates": n})


def _literal_choices(mod: _Module, typ: ast.expr) -> list[Any] | None:
    """Choices of ``Literal[...]``, also inside ``Optional[...]``."""
    if isinstance(typ, ast.Subscript):
        head = typ.value.id if isinstance(typ.value, ast.Name) else getattr(typ.value, "attr", "")
        if head == "Literal":
            sl = typ.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            return [e.value for e in elts if isinstance(e, ast.Constant)]
        if head == "Optional":
            return _literal_choices(mod, typ.slice)
    return None


def _is_bool(typ: ast.expr) -> bool:
    if isinstance(typ, ast.Name):
        return typ.id == "bool"
    if isinstance(typ, ast.Subscript) and getattr(typ.value, "id", "") == "Optional":
        return _is_bool(typ.slice)
    return False


def _from_dataclass_fields(
    mod: _Module, tree: ast.Module, flags: dict[str, dict[str, Any]], classes: tuple[str, ...] | None
) -> None:
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and (classes is None or n.name in classes)):
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            ann = node.annotation
            if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", "") in ("A", "Annotated")):
                continue
            if not isinstance(ann.slice, ast.Tuple) or len(ann.slice.elts) < 2:
                continue
            typ, *metas = ann.slice.elts
            arg = next(
                (m for m in metas if isinstance(m, ast.Call) and getattr(m.func, "id", "") == "Arg"),
                None,
            )
            bare = any(isinstance(m, ast.Constant) and isinstance(m.value, str) for m in metas)
            if arg is None and not bare:
                continue
            kw = _kw(arg) if arg is not None else {}
            if _const(kw.get("no_cli")) is True:
                continue
            field = node.target.id
            cli = _const(kw.get("cli_name")) or "--" + field.replace("_", "-")
            aliases = mod.resolve(kw.get("aliases")) if "aliases" in kw else []
            action = _action_name(kw.get("action"))
            choices = mod.resolve(kw["choices"]) if "choices" in kw else _literal_choices(mod, typ)
            takes_value = not (action in SWITCH_ACTIONS or (not action and _is_bool(typ)))
            bare_help = next((m for m in metas if isinstance(m, ast.Constant) and isinstance(m.value, str)), None)
            helptext = _help_text(kw.get("help", bare_help))
            entry = _entry(takes_value, choices, _is_deprecated(action, helptext), field, _new_flag_in(helptext))
            names = [cli, *(aliases if isinstance(aliases, list) else [])]
            for n in names:
                flags.setdefault(n, entry)
            if action == NEGATABLE:
                _add_negations(names, entry, flags)


def _environment(zf: zipfile.ZipFile) -> dict[str, dict[str, Any]]:
    """The ``SGLANG_*`` (and other) switches of ``sglang/srt/environ.py``'s ``Envs``: kind and default."""
    if "sglang/srt/environ.py" not in zf.namelist():
        return {}
    out: dict[str, dict[str, Any]] = {}
    tree = ast.parse(zf.read("sglang/srt/environ.py"))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Envs"):
        for node in cls.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            call = node.value if isinstance(node, ast.Assign) else None
            if not (isinstance(target, ast.Name) and isinstance(call, ast.Call)):
                continue
            kind = ENV_KINDS.get(_action_name(call.func))
            if kind is None:
                continue
            default = _const(call.args[0]) if call.args else None
            plain = isinstance(default, bool | int | float | str)
            out[target.id] = {"kind": kind, "default": default if plain else None}
    return dict(sorted(out.items()))


def extract(wheel: Path, version: str) -> dict[str, Any]:
    """The flag table of one release: every ``--flag`` launch_server accepts, its choices and deprecations."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        main = ast.parse(zf.read("sglang/srt/server_args.py"))
        # From 0.5.20 the fields live in arg_groups/fields/<namespace>.py (one class each), the
        # choice lists in arg_groups/choices.py, and ServerArgs composes them.
        groups = [n for n in names if n.startswith("sglang/srt/arg_groups/") and n.endswith(".py")]
        fields = {n: ast.parse(zf.read(n)) for n in groups if n.startswith("sglang/srt/arg_groups/fields/")}
        others = [ast.parse(zf.read(n)) for n in groups if n not in fields]
        # 0.5.23 keeps the parser names in lightweight modules (parser_names.py, reasoning_parser_names.py)
        names_mods = [ast.parse(zf.read(n)) for n in names if n.startswith("sglang/srt/") and n.endswith("_names.py")]
        mod = _Module([main, *fields.values(), *others, *names_mods], _registries(zf))
        flags: dict[str, dict[str, Any]] = {}
        for tree in (main, *others, *fields.values()):
            _from_add_argument(mod, tree, flags)
        _from_dataclass_fields(mod, main, flags, ("ServerArgs",))
        for tree in fields.values():
            _from_dataclass_fields(mod, tree, flags, None)
        deprecated_values = _deprecated_values(zf)
        environment = _environment(zf)
    return {
        "schema": "sglang-flags/2",
        "sglang_version": version,
        "source": "sglang/srt/server_args.py and arg_groups/ of the PyPI wheel (images/flags/extract.py)",
        "deprecated_values": deprecated_values,
        "environment": environment,
        "flags": dict(sorted(flags.items())),
    }


def dumps(table: dict[str, Any]) -> str:
    """One flag per line: reviewable diffs between releases."""
    head = {k: v for k, v in table.items() if k not in ("flags", "environment")}
    lines = [json.dumps(head, sort_keys=True)[:-1] + ","]
    for key in ("environment", "flags"):
        lines.append(f"{json.dumps(key)}: {{")
        items = list(table[key].items())
        for i, (name, entry) in enumerate(items):
            sep = "," if i < len(items) - 1 else ""
            lines.append(f"  {json.dumps(name)}: {json.dumps(entry, sort_keys=True)}{sep}")
        lines.append("}," if key == "environment" else "}}")
    return "\n".join(lines) + "\n"


def table_path(version: str) -> Path:
    return TABLES / f"sglang-{version}.json"


def main(argv: list[str] | None = None) -> int:
    from build import BuildError, ensure_wheel  # images/build.py: the cached PyPI download

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("versions", nargs="*", help=f"releases (default: all supported, {SUPPORTED[0]}..{SUPPORTED[-1]})")
    ap.add_argument("--check", action="store_true", help="compare with the committed tables instead of writing")
    args = ap.parse_args(argv)
    bad = 0
    for v in args.versions or SUPPORTED:
        try:
            table = dumps(extract(ensure_wheel("sglang", v), v))
        except BuildError as exc:
            print(f"sglang {v}: {exc}", file=sys.stderr)
            return 2
        path = table_path(v)
        if args.check:
            same = path.is_file() and path.read_text() == table
            bad += not same
            print(f"sglang {v}: {'ok' if same else 'DIFFERS from ' + str(path)}")
        else:
            TABLES.mkdir(parents=True, exist_ok=True)
            path.write_text(table)
            print(f"sglang {v}: {len(json.loads(table)['flags'])} flags -> {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
