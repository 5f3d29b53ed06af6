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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .userregex import UserRegexError, compile_user_regex

# Durations and thresholds must be finite: a `.inf` timeout would hang a rollout forever.
PosFloat = Annotated[float, Field(gt=0, le=1_000_000_000, allow_inf_nan=False)]
Rate = Annotated[float, Field(gt=0)]  # request_rate alone may be .inf (all at once); NaN fails gt

# Upper bounds: a typo (``input_len: 100000000``) must be refused by name, not end in a
# MemoryError or a gate that runs for days. Each is far above any sane gate.
MAX_TOKENS_PER_REQUEST = 131_072  # prompt or output tokens of one request (GLM-5's context is 200k)
MAX_REQUESTS = 100_000  # requests in one run or sweep step
MAX_CONCURRENCY = 16_384  # streams in flight (each one socket)
MAX_TIMEOUT_S = 86_400.0  # any one deadline: a day
MAX_PROMPT_CHARS = 100_000
MAX_WORKLOAD_TOKENS = 64_000_000  # prompt ids held in memory for one phase (num_prompts x input_len)
Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS_PER_REQUEST)]
Requests = Annotated[int, Field(gt=0, le=MAX_REQUESTS)]
Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_REQUESTS)]

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
    timeout_s: Timeout = 900.0
    interval_s: Timeout = 5.0
    request_timeout_s: Timeout = 30.0
    max_health_latency_s: Timeout = 5.0


class SamplingConfig(_Section):
    """What the load phases send: production clients sample, so the gate does too (never greedy only)."""

    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.95
    top_k: Annotated[int, Field(ge=-1, le=100_000)] = -1  # SGLang's -1: off


class ThroughputConfig(_Section):
    enabled: bool = True
    num_prompts: Requests = 256
    input_len: Tokens = 256
    output_len: Tokens = 128
    request_rate: Rate = math.inf
    max_concurrency: Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)] | None = None
    seed: Annotated[int, Field(ge=0, le=1_000_000_000)] = 1
    vocab_size: Annotated[int, Field(gt=0, le=10_000_000)] = 32000
    warmup_requests: Annotated[int, Field(ge=0, le=1024)] = 1
    timeout_s: Timeout = 600.0
    repeats: Annotated[int, Field(gt=0, le=20)] = 3
    max_repeats: Annotated[int, Field(gt=0, le=20)] = 7
    max_spread: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 0.10
    # from 4 runs, runs that scatter more than max_spread still pass when their median is known this
    # well (relative standard error of the median): 5 % keeps the regression rule's noise allowance,
    # 2 x sqrt(2) x 5 % = 14 %, inside baseline.max_drop (15 %). validate/README.md, "Noise".
    max_noise: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.05
    flush_cache: bool = True  # POST /flush_cache before each run: every run starts from the same server state
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
    prompt: str = Field(default="Count from 1 to 100", min_length=1, max_length=MAX_PROMPT_CHARS)
    max_tokens: Tokens = 500
    timeout_s: Timeout = 300.0
    repeats: Annotated[int, Field(gt=0, le=9)] = 3  # the decode speed is the median of the repeats
    min_decode_tok_s: PosFloat | None = None
    max_ttft_ms: PosFloat | None = None


class StabilityConfig(_Section):
    enabled: bool = True
    concurrency: list[Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)]] = Field(
        default_factory=lambda: [256, 512, 1024], min_length=1, max_length=16
    )
    requests_per_step: Requests | None = None
    input_len: Tokens = 256
    output_len: Tokens = 128
    max_failed: NonNegInt = 0
    step_timeout_s: Timeout = 900.0
    health_timeout_s: Timeout = 30.0


class LogSignature(_Section):
    name: str = Field(min_length=1, max_length=100)
    pattern: str = Field(min_length=1, max_length=1000)


def _user_regex(pattern: str, what: str) -> str:
    """A user's pattern must compile in RE2 (linear time: no pattern can hang the scan)."""
    try:
        compile_user_regex(pattern)
    except UserRegexError as exc:
        raise ValueError(f"{what}: {exc}") from None
    return pattern


class LogsConfig(_Section):
    enabled: bool = True
    context_lines: Annotated[int, Field(ge=0, le=50)] = 3
    extra_signatures: list[LogSignature] = Field(default_factory=list, max_length=64)

    @field_validator("extra_signatures")
    @classmethod
    def _compile(cls, sigs: list[LogSignature]) -> list[LogSignature]:
        for s in sigs:
            _user_regex(s.pattern, f"signature {s.name!r}")
        return sigs


class Probe(_Section):
    """A prompt whose answer must contain ``expect`` (substring) or match ``expect_regex`` (RE2)."""

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    expect: str | None = Field(default=None, min_length=1)
    expect_regex: str | None = Field(default=None, min_length=1, max_length=1000)
    max_tokens: Annotated[int, Field(gt=0, le=4096)] = 64

    @model_validator(mode="after")
    def _one_expectation(self) -> Probe:
        if (self.expect is None) == (self.expect_regex is None):
            raise ValueError("give exactly one of expect (a substring) or expect_regex (an RE2 pattern)")
        if self.expect_regex is not None:
            _user_regex(self.expect_regex, "expect_regex")
        return self


class ReferenceConfig(_Section):
    """The group's reference answers (validate/phases.py): recorded by its first gate, scored on every later one."""

    enabled: bool = True
    max_new_tokens: Annotated[int, Field(gt=0, le=512)] = 32
    tolerance: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 0.1
    timeout_s: Timeout = 120.0


class AnswersConfig(_Section):
    """What counts as an answer at all (validate/checks.py), in every phase."""

    enabled: bool = True
    min_tokens: Annotated[int, Field(gt=1, le=MAX_TOKENS_PER_REQUEST)] = 16
    max_repeat_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.5
    probes: list[Probe] = Field(default_factory=list, max_length=32)
    reference: ReferenceConfig = Field(default_factory=ReferenceConfig)


Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class AccuracyConfig(_Section):
    """Known answers on every host (validate/arithmetic.py): few-shot, greedy, raw prompts on /generate.

    The floors are the profile's: the defaults are a wide net for any capable instruct model
    (a fluent server whose numbers are wrong scores near 0); set the model's own from a
    published few-shot result (inventory/example: GLM-5's)."""

    enabled: bool = True
    questions: Annotated[int, Field(gt=0, le=5000)] = 200
    shots: Annotated[int, Field(ge=0, le=16)] = 5
    seed: Annotated[int, Field(ge=0, le=1_000_000_000)] = 1
    max_new_tokens: Annotated[int, Field(gt=0, le=4096)] = 256
    concurrency: Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)] = 128
    timeout_s: Timeout = 300.0
    min_accuracy: Fraction | None = 0.5
    max_invalid: Fraction | None = 0.1
    # a drop below the group's reference accuracy beyond noise_z binomial standard errors fails
    noise_z: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 3.0


class BaselineConfig(_Section):
    tolerance: Annotated[float, Field(gt=0, le=1)] = 0.95
    # the regression rule widens the allowed drop to noise_z x the measured noise of the two medians,
    # never beyond max_drop (validate/README.md, "Noise")
    noise_z: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 2.0
    max_drop: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.15
    # a regression must persist: a key metric below the reference is measured again after
    # confirm_wait_s (only the phase it comes from) and judged on that second measurement
    # (validate/README.md, "Noise"); false: judged on the first
    confirm: bool = True
    confirm_wait_s: Annotated[float, Field(ge=0, le=600, allow_inf_nan=False)] = 15.0
    metrics: list[BaselineMetric] = Field(
        default_factory=lambda: [
            "total_token_throughput",
            "output_token_throughput",
            "single_stream_decode_tok_s",
        ]
    )


class GateConfig(_Section):
    """The whole gate.yml."""

    model: str | None = Field(default=None, min_length=1, max_length=1000)
    deadline_s: Timeout = 3300.0
    progress_interval_s: Timeout = 10.0
    readiness: ReadinessConfig = Field(default_factory=ReadinessConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    answers: AnswersConfig = Field(default_factory=AnswersConfig)
    accuracy: AccuracyConfig = Field(default_factory=AccuracyConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    single_stream: SingleStreamConfig = Field(default_factory=SingleStreamConfig)
    stability: StabilityConfig = Field(default_factory=StabilityConfig)
    logs: LogsConfig = Field(default_factory=LogsConfig)
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)

    @model_validator(mode="after")
    def _workload_fits(self) -> GateConfig:
        tp, st = self.throughput, self.stability
        if tp.max_repeats < tp.repeats:
            raise ValueError(f"throughput.max_repeats ({tp.max_repeats}) must be >= throughput.repeats ({tp.repeats})")
        for name, n, length in (
            ("throughput", tp.num_prompts, tp.input_len),
            ("stability", st.requests_per_step or max(st.concurrency), st.input_len),
        ):
            if n * length > MAX_WORKLOAD_TOKENS:
                raise ValueError(
                    f"{name}: {n} prompts x {length} tokens = {n * length:,} prompt tokens, "
                    f"more than the {MAX_WORKLOAD_TOKENS:,} the gate holds in memory"
                )
        return self


class ConfigError(Exception):
    """Bad gate config or usage: the message is what the operator reads; exit 2."""


# ----- turning pydantic errors into one line per field -----

# The constraints the fields use, as the message says them (tests/validate/test_config_errors.py
# checks every field's constraints are among these).
BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
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


def _number(v: float) -> str:
    """A bound as the operator types it: 100,000 and 0.95, never 1e+05."""
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


def _rule(ann: Any, meta: list[Any]) -> str:
    """'must be a number > 0' from the field's type and constraints."""
    args = typing.get_args(ann)
    optional = type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else ann
    base, extra = _unannotate(base)
    constraints = meta + extra
    bounds = [
        f"{sym} {_number(getattr(m, attr))}"
        for m in constraints
        for attr, sym in BOUNDS
        if isinstance(m, getattr(annotated_types, attr.capitalize()))
    ]
    most = next((m.max_length for m in constraints if isinstance(m, annotated_types.MaxLen)), None)
    if typing.get_origin(base) is Literal:
        return "must be one of: " + ", ".join(typing.get_args(base))
    if typing.get_origin(base) is list:
        item, item_meta = _unannotate(typing.get_args(base)[0])
        non_empty = any(isinstance(m, annotated_types.MinLen) and m.min_length > 0 for m in constraints)
        each = _rule(item, item_meta).removeprefix("must be ")
        size = f" of at most {most} items" if most is not None else ""
        return f"must be a {'non-empty ' if non_empty else ''}list{size}; each item {each}"
    if _model_of(base) is base:
        return "must be a mapping (keys: " + ", ".join(base.model_fields) + ")"
    text = f"must be {TYPE_WORDS[base]}" + (" " + " and ".join(bounds) if bounds else "")
    if most is not None:
        text += f" of at most {most:,} characters"
    return text + (" (or null)" if optional else "")


def _format_error(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])  # empty only for a whole-config rule (GateConfig._workload_fits)
    path = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
    etype = err["type"]
    got = err.get("input")
    if etype == "extra_forbidden":
        model = _model_of(_field_for(loc[:-1])[0]) if len(loc) > 1 else GateConfig
        return f"gate config: {path}: unknown key (allowed here: {', '.join(model.model_fields)})"
    if etype == "missing":
        return f"gate config: {path}: required key is missing"
    if etype == "value_error":  # a whole-config rule (no path) names its fields itself
        return f"gate config: {(path + ': ') if path else ''}{str(err['msg']).removeprefix('Value error, ')}"
    rule = _rule(*_field_for(loc))
    if etype == "finite_number":
        rule = rule.replace("a number", "a finite number", 1)
    if etype == "string_too_short":
        rule += " (must not be empty)"
    if etype in ("string_too_long", "too_long"):
        got = f"{len(got):,} {'characters' if isinstance(got, str) else 'items'}" if got is not None else got
        return f"gate config: {path}: {rule} (got {got})"
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
