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

# The constraints the fields use, as the message says them (tests/validate/test_config_errors.py
# checks every field's constraints are among these).
BOUNDS = (("gt", ">"), ("ge", ">="), ("le", "<="))
TYPE_WORDS = {float: "a number", int: "a whole number", bool: "true or false", str: "a string"}


def _unannotate(ann: Any) -> tuple[Any, list[Any]]:
    """``Annotated[X, Field(gt=0)]`` -> (X, [Gt(0)]); anything else -> (it, [])."""
    if typing.get_origin(ann) is not Annotated:
        return ann, []
    base, *extra = typing.get_args(ann)
    return base, [m for x in extra for m in getattr(x, "metadata", [x])]


def _model_of(ann: Any) -> type[BaseModel] | None:
    """The section model an annotation holds (``ReadinessConfig``, ``list[LogSignature]``...), if any."""
    for cand in (ann, *typing.get_args(ann)):
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def _field_for(loc: tuple[int | str, ...]) -> tuple[Any, list[Any]]:
    """(annotation, constraints) of the field ``loc`` names; (None, []) when it names none."""
    model: type[BaseModel] | None = GateConfig
    ann: Any = None
    meta: list[Any] = []
    for part in loc:
        if isinstance(part, int):  # an item of a list field
            ann, meta = _unannotate(typing.get_args(ann)[0])
        elif model is not None and part in model.model_fields:
            info = model.model_fields[part]
            ann, meta = info.annotation, list(info.metadata)
        else:
            return None, []
        model = _model_of(ann)
    return ann, meta


def _rule(ann: Any, meta: list[Any]) -> str:
    """'must be a number > 0' from the field's type and constraints."""
    args = typing.get_args(ann)
    optional = type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else ann
    base, extra = _unannotate(base)
    constraints = meta + extra
    bounds = [
        f"{sym} {getattr(m, attr):g}"
        for m in constraints
        for attr, sym in BOUNDS
        if isinstance(m, getattr(annotated_types, attr.capitalize()))
    ]
    if typing.get_origin(base) is Literal:
        return "must be one of: " + ", ".join(typing.get_args(base))
    if typing.get_origin(base) is list:
        item, item_meta = _unannotate(typing.get_args(base)[0])
        non_empty = any(isinstance(m, annotated_types.MinLen) and m.min_length > 0 for m in constraints)
        each = _rule(item, item_meta).removeprefix("must be ")
        return f"must be a {'non-empty ' if non_empty else ''}list; each item {each}"
    if _model_of(base) is base:
        return "must be a mapping (keys: " + ", ".join(base.model_fields) + ")"
    text = f"must be {TYPE_WORDS[base]}" + (" " + " and ".join(bounds) if bounds else "")
    return text + (" (or null)" if optional else "")


def _format_error(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])  # never empty: parse_config refuses a document that is not a mapping
    path = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
    etype = err["type"]
    got = err.get("input")
    if etype == "extra_forbidden":
        model = _model_of(_field_for(loc[:-1])[0]) if len(loc) > 1 else GateConfig
        return f"gate config: {path}: unknown key (allowed here: {', '.join(model.model_fields)})"
    if etype == "missing":
        return f"gate config: {path}: required key is missing"
    if etype == "value_error":
        return f"gate config: {path}: {str(err['msg']).removeprefix('Value error, ')}"
    rule = _rule(*_field_for(loc))
    if etype == "finite_number":
        rule = rule.replace("a number", "a finite number", 1)
    if etype == "string_too_short":
        rule += " (must not be empty)"
    return f"gate config: {path}: {rule} (got {got!r})"


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
