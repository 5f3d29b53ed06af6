"""Command line of the test engine: SGLang's launch_server flags plus ``--engine-*`` knobs.

The roles start the production image and the test-engine image with the same SGLang
flags, so this parser accepts SGLang's flag names (and tolerates ones it does not
know: they are recorded and reported, never fatal, because a newer SGLang flag in a
role must not break CI). The engine's own behaviour is set with ``--engine-*`` flags
or ``TEST_ENGINE_*`` environment variables (the flag wins).

Runs on Debian bookworm's system Python 3.11 with only aiohttp/prometheus-client/yaml:
no pydantic here, and nothing from ``validate``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

TEST_ENGINE_VERSION = "0.1.0"
VERSION_STRING = f"test-engine-{TEST_ENGINE_VERSION} (SGLang-compatible test engine, not SGLang)"

# SGLang launch_server flags with a value: (flag, type, default). The dest names
# match SGLang's ServerArgs fields so /get_server_info reads like SGLang's.
_VALUE_FLAGS: list[tuple[str, type, Any]] = [
    ("--model-path", str, "test-engine/GLM-5-NVFP4"),
    ("--tokenizer-path", str, None),
    ("--served-model-name", str, None),
    ("--host", str, "127.0.0.1"),
    ("--port", int, 30000),
    ("--api-key", str, None),
    ("--tp-size", int, 1),
    ("--dp-size", int, 1),
    ("--pp-size", int, 1),
    ("--ep-size", int, 1),
    ("--kv-cache-dtype", str, "auto"),
    ("--quantization", str, None),
    ("--dtype", str, "auto"),
    ("--attention-backend", str, None),
    ("--prefill-attention-backend", str, None),
    ("--decode-attention-backend", str, None),
    ("--moe-runner-backend", str, "auto"),
    ("--max-running-requests", int, None),
    ("--max-queued-requests", int, None),
    ("--max-total-tokens", int, None),
    ("--context-length", int, None),
    ("--chunked-prefill-size", int, None),
    ("--cuda-graph-max-bs", int, None),
    ("--cuda-graph-max-bs-decode", int, None),
    ("--mem-fraction-static", float, None),
    ("--stream-interval", int, 1),
    ("--reasoning-parser", str, None),
    ("--tool-call-parser", str, None),
    ("--dsa-prefill-backend", str, None),
    ("--dsa-decode-backend", str, None),
    ("--nsa-prefill-backend", str, None),
    ("--nsa-decode-backend", str, None),
    ("--speculative-algorithm", str, None),
    ("--log-level", str, "info"),
    ("--random-seed", int, None),
    ("--load-format", str, "auto"),
    ("--weight-version", str, "default"),
]
_BOOL_FLAGS: list[str] = [
    "--trust-remote-code",
    "--disable-radix-cache",
    "--enable-metrics",
    "--disable-cuda-graph",
    "--disable-custom-all-reduce",
    "--disable-shared-experts-fusion",
    "--enable-flashinfer-allreduce-fusion",
    "--enable-dp-attention",
    "--skip-server-warmup",
    "--enable-cache-report",
    "--disable-overlap-schedule",
]
# Aliases SGLang accepts for the same field.
_ALIASES: dict[str, str] = {"--tp": "--tp-size", "--dp": "--dp-size", "--model": "--model-path"}

FAULT_NAMES = (
    "crash_above",
    "hang_above",
    "hang",
    "slow_single",
    "nan",
    "error_rate",
    "log_signature",
    "degenerate",
    "sampled_error",
    "usage_inflate",
    "overlong",
    "restart_after",
    "slow_health",
    "stall_after",
    "slow_first",
    "shifted_digits",
)
LOG_SIGNATURE_NAMES = ("cuda", "nccl", "oom", "nan", "page_table")


@dataclass(frozen=True)
class Faults:
    """Fault modes chosen at start (``--engine-fault``); all off by default."""

    crash_above: int | None = None
    hang_above: int | None = None
    slow_single_tok_s: float | None = None
    nan: bool = False
    error_rate: float = 0.0
    log_signature: str | None = None
    degenerate: bool = False
    sampled_error: bool = False
    usage_inflate: float | None = None
    overlong: int | None = None
    restart_after: int | None = None
    slow_health_s: float | None = None
    stall_after: int | None = None
    slow_first: int | None = None  # decode 3x slower until more than N generation requests came: a dip that passes
    shifted_digits: bool = False  # every generated digit one up (9 -> 0): fluent, well-formed, wrong answers

    def describe(self) -> list[str]:
        """Human list of active faults, reported in /get_server_info."""
        out = [
            text
            for on, text in (
                (self.degenerate, "degenerate"),
                (self.sampled_error, "sampled_error"),
                (self.usage_inflate is not None, f"usage_inflate:{self.usage_inflate:g}" if self.usage_inflate else ""),
                (self.overlong is not None, f"overlong:{self.overlong}"),
                (self.restart_after is not None, f"restart_after:{self.restart_after}"),
                (self.slow_health_s is not None, f"slow_health:{self.slow_health_s:g}" if self.slow_health_s else ""),
                (self.stall_after is not None, f"stall_after:{self.stall_after}"),
                (self.slow_first is not None, f"slow_first:{self.slow_first}"),
                (self.shifted_digits, "shifted_digits"),
            )
            if on
        ]
        if self.crash_above is not None:
            out.append(f"crash_above:{self.crash_above}")
        if self.hang_above is not None:
            out.append(f"hang_above:{self.hang_above}")
        if self.slow_single_tok_s is not None:
            out.append(f"slow_single:{self.slow_single_tok_s:g}")
        if self.nan:
            out.append("nan")
        if self.error_rate:
            out.append(f"error_rate:{self.error_rate:g}")
        if self.log_signature:
            out.append(f"log_signature:{self.log_signature}")
        return out


@dataclass(frozen=True)
class Knobs:
    """The speed model and startup behaviour of the test engine."""

    prefill_tok_s: float = 200_000.0
    decode_base_ms: float = 25.0
    decode_per_req_ms: float = 0.1
    startup_delay_s: float = 0.0
    cold_start_s: float = 5.0
    cache_dir: str = "/root/.cache/flashinfer"
    flashinfer_version: str = "0.6.3"
    arch: str = "120a"
    instant: bool = False
    seed: int = 0
    weights_seed: int = 0  # "other weights": other greedy tokens and lower log-probabilities (answers check)
    default_max_running: int = 256


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine was started with."""

    server_args: dict[str, Any]
    unknown_args: list[str]
    knobs: Knobs
    faults: Faults
    max_running_requests: int
    model_name: str


class ConfigError(ValueError):
    """A bad ``--engine-*`` value; the message names the flag."""


def parse_faults(spec: str) -> Faults:
    """Parse ``crash_above:N,hang_above:N,slow_single:TOKS,nan,error_rate:F,log_signature:NAME``."""
    values: dict[str, Any] = {}
    for raw in filter(None, (p.strip() for p in spec.split(","))):
        name, _, arg = raw.partition(":")
        if name not in FAULT_NAMES:
            raise ConfigError(f"--engine-fault: unknown fault {name!r} (allowed: {', '.join(FAULT_NAMES)})")
        try:
            if name == "crash_above":
                values["crash_above"] = int(arg)
            elif name == "hang_above":
                values["hang_above"] = int(arg)
            elif name == "hang":
                values["hang_above"] = 0
            elif name == "slow_single":
                values["slow_single_tok_s"] = float(arg)
                if values["slow_single_tok_s"] <= 0:
                    raise ValueError
            elif name == "nan":
                values["nan"] = True
            elif name == "error_rate":
                values["error_rate"] = float(arg)
                if not 0.0 <= values["error_rate"] <= 1.0:
                    raise ValueError
            elif name in ("degenerate", "sampled_error", "shifted_digits"):
                values[name] = True
            elif name == "usage_inflate":
                values["usage_inflate"] = float(arg)
                if values["usage_inflate"] <= 0:
                    raise ValueError
            elif name in ("overlong", "restart_after", "stall_after", "slow_first"):
                values[name] = int(arg)
                if values[name] < 0:
                    raise ValueError
            elif name == "slow_health":
                values["slow_health_s"] = float(arg)
                if values["slow_health_s"] < 0:
                    raise ValueError
            elif name == "log_signature":
                if arg not in LOG_SIGNATURE_NAMES:
                    raise ConfigError(
                        f"--engine-fault: log_signature:{arg}: unknown signature "
                        f"(allowed: {', '.join(LOG_SIGNATURE_NAMES)})"
                    )
                values["log_signature"] = arg
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"--engine-fault: bad value in {raw!r}") from None
    return Faults(**values)


def _env_default(name: str, cast: type, default: Any) -> Any:
    raw = os.environ.get(f"TEST_ENGINE_{name.upper()}")
    if raw is None:
        return default
    if cast is bool:
        return raw.strip().lower() in ("1", "true", "yes", "on")
    try:
        return cast(raw)
    except ValueError:
        raise ConfigError(f"TEST_ENGINE_{name.upper()}: not a valid {cast.__name__}: {raw!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """SGLang-shaped parser; unknown flags are left for parse_known_args."""
    p = argparse.ArgumentParser(
        prog="python -m testengine",
        description="SGLang-compatible TEST ENGINE for CI (not SGLang; no GPU, no model).",
        allow_abbrev=False,
    )
    for flag, cast, default in _VALUE_FLAGS:
        aliases = [a for a, target in _ALIASES.items() if target == flag]
        p.add_argument(flag, *aliases, type=cast, default=default)
    for flag in _BOOL_FLAGS:
        p.add_argument(flag, action="store_true")
    g = p.add_argument_group("test engine knobs (or TEST_ENGINE_<NAME> env vars)")
    g.add_argument("--engine-prefill-tok-s", type=float, default=None, help="prefill speed, tokens/s")
    g.add_argument("--engine-decode-base-ms", type=float, default=None, help="decode step time at batch 1")
    g.add_argument("--engine-decode-per-req-ms", type=float, default=None, help="step growth per running request")
    g.add_argument("--engine-startup-delay-s", type=float, default=None, help="/health answers 503 this long")
    g.add_argument("--engine-cold-start-s", type=float, default=None, help="extra start time with a cold cache")
    g.add_argument("--engine-cache-dir", default=None, help="simulated FlashInfer cache folder")
    g.add_argument("--engine-flashinfer-version", default=None)
    g.add_argument("--engine-arch", default=None)
    g.add_argument("--engine-instant", action="store_true", default=None, help="answer at once (benchmarks)")
    g.add_argument("--engine-seed", type=int, default=None)
    g.add_argument("--engine-weights-seed", type=int, default=None, help="other made-up weights (0 = the default)")
    g.add_argument("--engine-fault", default=None, help="comma list: crash_above:N,hang_above:N,slow_single:TOKS,...")
    return p


def parse_args(argv: list[str]) -> EngineConfig:
    """Parse argv into an EngineConfig; raises ConfigError (or SystemExit from argparse)."""
    parser = build_parser()
    ns, unknown = parser.parse_known_args(argv)
    raw = vars(ns)
    knob_values = {k: v for k, v in raw.items() if k.startswith("engine_")}
    server_args = {k: v for k, v in raw.items() if not k.startswith("engine_")}
    defaults = Knobs()

    def pick(name: str, cast: type) -> Any:
        cli = knob_values.get(f"engine_{name}")
        if cli is not None:
            return cli
        return _env_default(name, cast, getattr(defaults, name))

    knobs = Knobs(
        prefill_tok_s=pick("prefill_tok_s", float),
        decode_base_ms=pick("decode_base_ms", float),
        decode_per_req_ms=pick("decode_per_req_ms", float),
        startup_delay_s=pick("startup_delay_s", float),
        cold_start_s=pick("cold_start_s", float),
        cache_dir=pick("cache_dir", str),
        flashinfer_version=pick("flashinfer_version", str),
        arch=pick("arch", str),
        instant=bool(pick("instant", bool)),
        seed=pick("seed", int),
        weights_seed=pick("weights_seed", int),
    )
    for name in ("prefill_tok_s",):
        if getattr(knobs, name) <= 0:
            raise ConfigError(f"--engine-{name.replace('_', '-')}: must be > 0")
    for name in ("decode_base_ms", "decode_per_req_ms", "startup_delay_s", "cold_start_s"):
        if getattr(knobs, name) < 0:
            raise ConfigError(f"--engine-{name.replace('_', '-')}: must be >= 0")
    fault_spec = knob_values.get("engine_fault")
    if fault_spec is None:
        fault_spec = os.environ.get("TEST_ENGINE_FAULT", "")
    faults = parse_faults(fault_spec)
    max_running = server_args.get("max_running_requests") or defaults.default_max_running
    if max_running <= 0:
        raise ConfigError("--max-running-requests: must be > 0")
    model_name = server_args.get("served_model_name") or server_args["model_path"]
    return EngineConfig(
        server_args=server_args,
        unknown_args=list(unknown),
        knobs=knobs,
        faults=faults,
        max_running_requests=max_running,
        model_name=model_name,
    )
