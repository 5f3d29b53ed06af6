"""Gate configuration: pydantic models with ``extra="forbid"`` and one-line errors.

An operator at 3 a.m. must see *which* field is wrong and what it accepts, so every
validation error is turned into ``gate config: <dotted.path>: <rule> (got <value>)``
and the CLI exits 2. Every field is documented in validate/README.md.
"""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Durations and thresholds must be finite: a `.inf` timeout would hang a rollout forever.
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Rate = Annotated[float, Field(gt=0)]  # request_rate alone may be .inf (all at once); NaN fails gt
PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]

BaselineMetric = Literal[
    "total_token_throughput",
    "output_token_throughput",
    "request_throughput",
    "single_stream_decode_tok_s",
    "p99_ttft_ms",
    "p99_e2e_latency_ms",
    "mean_e2e_latency_ms",
]


class _Section(BaseModel):
    # strict: YAML `true` is not a count and "10" is not a number (ints still pass as floats)
    model_config = ConfigDict(extra="forbid", strict=True)


class ReadinessConfig(_Section):
    timeout_s: PosFloat = 900.0
    interval_s: PosFloat = 5.0
    request_timeout_s: PosFloat = 30.0


class ThroughputConfig(_Section):
    enabled: bool = True
    num_prompts: PosInt = 256
    input_len: PosInt = 256
    output_len: PosInt = 128
    request_rate: Rate = math.inf
    max_concurrency: PosInt | None = None
    seed: int = 1
    vocab_size: PosInt = 32000
    warmup_requests: NonNegInt = 1
    timeout_s: PosFloat = 600.0
    repeats: Annotated[int, Field(gt=0, le=20)] = 3
    max_spread: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 0.10
    min_total_tok_s: PosFloat | None = None
    min_output_tok_s: PosFloat | None = None
    max_p99_ttft_ms: PosFloat | None = None
    max_p99_e2e_ms: PosFloat | None = None
    max_mean_e2e_ms: PosFloat | None = None
    max_failed: NonNegInt = 0

    @field_validator("request_rate", mode="before")
    @classmethod
    def _inf(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity", ".inf"):
            return math.inf
        return v


class SingleStreamConfig(_Section):
    enabled: bool = True
    prompt: str = Field(default="Count from 1 to 100", min_length=1)
    max_tokens: PosInt = 500
    timeout_s: PosFloat = 300.0
    min_decode_tok_s: PosFloat | None = None
    max_ttft_ms: PosFloat | None = None


class StabilityConfig(_Section):
    enabled: bool = True
    concurrency: list[PosInt] = Field(default_factory=lambda: [256, 512, 1024], min_length=1)
    requests_per_step: PosInt | None = None
    input_len: PosInt = 256
    output_len: PosInt = 128
    max_failed: NonNegInt = 0
    step_timeout_s: PosFloat = 900.0
    health_timeout_s: PosFloat = 30.0


class LogSignature(_Section):
    name: str = Field(min_length=1)
    pattern: str = Field(min_length=1)


class LogsConfig(_Section):
    enabled: bool = True
    context_lines: NonNegInt = 3
    extra_signatures: list[LogSignature] = Field(default_factory=list)

    @field_validator("extra_signatures")
    @classmethod
    def _compile(cls, sigs: list[LogSignature]) -> list[LogSignature]:
        import re

        for s in sigs:
            try:
                re.compile(s.pattern)
            except re.error as exc:
                raise ValueError(f"signature {s.name!r}: pattern is not a valid regular expression ({exc})") from None
        return sigs


class BaselineConfig(_Section):
    tolerance: Annotated[float, Field(gt=0, le=1)] = 0.95
    metrics: list[BaselineMetric] = Field(
        default_factory=lambda: [
            "total_token_throughput",
            "output_token_throughput",
            "single_stream_decode_tok_s",
        ]
    )


class GateConfig(_Section):
    """The whole gate.yml."""

    progress_interval_s: PosFloat = 10.0
    readiness: ReadinessConfig = Field(default_factory=ReadinessConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    single_stream: SingleStreamConfig = Field(default_factory=SingleStreamConfig)
    stability: StabilityConfig = Field(default_factory=StabilityConfig)
    logs: LogsConfig = Field(default_factory=LogsConfig)
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)


class ConfigError(Exception):
    """Bad gate config or usage: the message is what the operator reads; exit 2."""


# ----- turning pydantic errors into one line per field -----


def _field_for(loc: tuple[int | str, ...]) -> tuple[Any, Any]:
    """Walk the models along ``loc``; return (annotation, FieldInfo) of the last field."""
    model: Any = GateConfig
    ann: Any = None
    info: Any = None
    for part in loc:
        if isinstance(part, int):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            ann = args[0] if args else None
            info = None
            if typing.get_origin(ann) is Annotated:
                ann, *meta = typing.get_args(ann)
                info = _MetaInfo(meta)
            model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
            continue
        if model is None or part not in getattr(model, "model_fields", {}):
            return None, None
        info = model.model_fields[part]
        ann = info.annotation
        inner = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) else []
        cand = inner[0] if len(inner) == 1 else ann
        model = cand if isinstance(cand, type) and issubclass(cand, BaseModel) else None
    return ann, info


class _MetaInfo:
    """Stand-in for FieldInfo built from Annotated metadata of list items."""

    def __init__(self, meta: list[Any]) -> None:
        self.metadata = [m for x in meta for m in getattr(x, "metadata", [x])]


def _rule(ann: Any, info: Any) -> str:
    """'must be a number > 0' from the field's type and constraints."""
    base = ann
    args = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) else []
    optional = bool(typing.get_args(ann)) and type(None) in typing.get_args(ann)
    if typing.get_origin(ann) is typing.Union and len(args) == 1:
        base = args[0]
    if typing.get_origin(base) is Annotated:
        base, *meta = typing.get_args(base)
        extra = [m for x in meta for m in getattr(x, "metadata", [x])]
    else:
        extra = []
    bounds = []
    for m in list(getattr(info, "metadata", []) or []) + extra:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if isinstance(m, getattr(annotated_types, attr.capitalize())):
                bounds.append(f"{sym} {getattr(m, attr):g}")
    if typing.get_origin(base) is Literal:
        return "must be one of: " + ", ".join(str(a) for a in typing.get_args(base))
    if typing.get_origin(base) is list:
        item = typing.get_args(base)[0] if typing.get_args(base) else None
        inner = _rule(item, None) if item is not None else "items"
        metadata = list(getattr(info, "metadata", []) or []) + extra
        non_empty = any(isinstance(m, annotated_types.MinLen) and m.min_length > 0 for m in metadata)
        return f"must be a {'non-empty ' if non_empty else ''}list; each item {inner.removeprefix('must be ')}"
    if isinstance(base, type) and issubclass(base, BaseModel):
        return "must be a mapping (keys: " + ", ".join(base.model_fields) + ")"
    names = {float: "a number", int: "a whole number", bool: "true or false", str: "a string"}
    what = names.get(base, getattr(base, "__name__", "valid"))
    text = f"must be {what}" + (" " + " and ".join(bounds) if bounds else "")
    return text + (" (or null)" if optional and base is not bool else "")


def _format_error(err: dict[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    path = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
    path = path or "(top level)"
    etype = err.get("type", "")
    got = err.get("input")
    if etype == "extra_forbidden":
        model = _model_of(_field_for(loc[:-1])[0]) if len(loc) > 1 else GateConfig
        allowed = ", ".join(model.model_fields) if model else "?"
        return f"gate config: {path}: unknown key (allowed here: {allowed})"
    if etype == "missing":
        return f"gate config: {path}: required key is missing"
    if etype == "finite_number":
        ann, info = _field_for(loc)
        rule = _rule(ann, info).replace("a number", "a finite number", 1)
        return f"gate config: {path}: {rule} (got {got!r})"
    if etype == "value_error":
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        return f"gate config: {path}: {msg}"
    ann, info = _field_for(loc)
    rule = _rule(ann, info) if ann is not None else str(err.get("msg", "invalid value")).lower()
    if etype in ("too_short", "string_too_short") and "non-empty" not in rule:
        rule += " (must not be empty)"
    return f"gate config: {path}: {rule} (got {got!r})"


def _model_of(ann: Any) -> Any:
    for cand in (ann, *typing.get_args(ann)):
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def parse_config(data: Any, source: str = "gate config") -> GateConfig:
    """Validate a loaded YAML document; raises ConfigError with one line per bad field."""
    if data is None:
        raise ConfigError(f"{source}: the file is empty (start from validate/configs/reference.yml)")
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    try:
        return GateConfig.model_validate(data)
    except ValidationError as exc:
        lines = [_format_error(e) for e in exc.errors(include_url=False)]
        raise ConfigError("\n".join(dict.fromkeys(lines))) from None


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice (PyYAML would silently keep the last)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: `min_total_tok_s` set twice is a mistake, not an override."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKeyError(f"duplicate key {key!r} at line {line} (first at line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path) -> GateConfig:
    """Read and validate gate.yml; every problem becomes a ConfigError (exit 2)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"gate config: file not found: {p}")
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # a SafeLoader subclass
    except DuplicateKeyError as exc:
        raise ConfigError(f"gate config: {p}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"gate config: {p}: not valid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"gate config: {p}: cannot read: {exc}") from None
    return parse_config(data, f"gate config: {p}")
