"""Turn the role's structured settings into an SGLang ``launch_server`` argv.

Why a filter and not a Jinja template: the flag set depends on the SGLang version
(renames and removals: docs/blackwell-profiles.md, "Flag tables") and on the image's patch record, and the
rules need unit tests. Every error names the inventory variable (``sglang_server_<key>``)
and the allowed values, so a bad inventory stops in preflight before any host changes.

Both the production image (``python3 -m sglang.launch_server``) and the test engine
(``python3 -m testengine``) receive the same argv (docs/architecture.md).

Which flags and values a release accepts is not guessed: the ``sglangflags`` package holds each
release's table, read from its wheel (images/flags/extract.py). The renderer picks the
flag names the release has (``--dsa-*`` vs ``--nsa-*``, ``--cuda-graph-max-bs-decode``,
``--flashinfer-allreduce-fusion-backend``) and refuses any flag or value the release's
``launch_server`` would refuse, naming the variable, the version and the allowed values.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

try:
    import sglangflags as flagtable
except ImportError as exc:  # the controller runs outside the bundle's virtualenv
    raise ImportError(
        "the sglang_server role needs the bundle's sglangflags package on the Ansible controller: "
        "run ansible-playbook from the bundle's virtualenv (bash scripts/setup.sh && . .venv/bin/activate)"
    ) from exc

PREFIX = "sglang_server_"
GUARD_FIX = "dsa-fp8-page-table-guard"

DSA_BACKENDS = (
    "",
    "flashmla_sparse",
    "flashmla_sparse_q8",
    "flashmla_kv",
    "flashmla_auto",
    "flashinfer_sparse_mla",
    "triton_sparse_mla",
    "fa3",
    "tilelang",
    "trtllm",
)
# sglang_server_speculative.algorithm: SGLang's --speculative-algorithm (NEXTN is its alias of EAGLE
# for a model's own MTP layer, GLM-5's GlmMoeDsaForCausalLMNextN).
SPECULATIVE_ALGORITHMS = ("", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SPECULATIVE_INTS = ("num_steps", "eagle_topk", "num_draft_tokens")
# FlashInfer's PCIe IPC all-reduce for GPUs without NVLink: an environment switch of SGLang >= 0.5.21.
PCIE_IPC_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"

# Superset of the values accepted across the SGLang releases we deploy (0.5.9 .. 0.5.23).
CHOICES: dict[str, tuple[str, ...]] = {
    "kv_cache_dtype": ("auto", "fp8_e4m3", "fp8_e5m2", "bf16"),
    "quantization": (
        "",
        "modelopt_fp4",
        "modelopt_fp8",
        "modelopt",
        "fp8",
        "mxfp4",
        "w4afp8",
        "w8a8_fp8",
        "w8a8_int8",
        "awq",
        "gptq",
        "compressed-tensors",
    ),
    "attention_backend": (
        "",
        "triton",
        "flashinfer",
        "fa3",
        "fa4",
        "flashmla",
        "cutlass_mla",
        "trtllm_mla",
        "trtllm_mha",
        "dsa",
        "nsa",
        "torch_native",
    ),
    # (each release's table then says which of these it has: flashinfer_sparse_mla from 0.5.17)
    "dsa_prefill_backend": DSA_BACKENDS,
    "dsa_decode_backend": DSA_BACKENDS,
    "moe_runner_backend": (
        "",
        "auto",
        "triton",
        "triton_kernel",
        "deep_gemm",
        "cutlass",
        "flashinfer_cutlass",
        "flashinfer_trtllm",
        "flashinfer_mxfp4",
        "flashinfer_cutedsl",
    ),
    "radix_cache": ("auto", "enabled", "disabled"),
}

# Flags a structured variable owns: putting them in extra_args as well is contradictory.
MANAGED_FLAGS: dict[str, str] = {
    "--model-path": "model_path",
    "--model": "model_path",
    "--served-model-name": "served_model_name",
    "--tp-size": "tp_size",
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--quantization": "quantization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--attention-backend": "attention_backend",
    "--nsa-prefill-backend": "dsa_prefill_backend",
    "--dsa-prefill-backend": "dsa_prefill_backend",
    "--nsa-decode-backend": "dsa_decode_backend",
    "--dsa-decode-backend": "dsa_decode_backend",
    "--moe-runner-backend": "moe_runner_backend",
    "--max-running-requests": "max_running_requests",
    "--mem-fraction-static": "mem_fraction_static",
    "--chunked-prefill-size": "chunked_prefill_size",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",
    "--disable-cuda-graph": "disable_cuda_graph",
    "--enable-metrics": "enable_metrics",
    "--host": "listen_host",
    "--port": "port",
    "--trust-remote-code": "trust_remote_code",
    "--reasoning-parser": "reasoning_parser",
    "--tool-call-parser": "tool_call_parser",
    "--disable-custom-all-reduce": "disable_custom_all_reduce",
    "--disable-shared-experts-fusion": "disable_shared_experts_fusion",
    "--enable-flashinfer-allreduce-fusion": "enable_flashinfer_allreduce_fusion",
    "--stream-interval": "stream_interval",
    "--disable-radix-cache": "radix_cache",
    "--disable-chunked-prefix-cache": "radix_cache",
    "--flashinfer-allreduce-fusion-backend": "enable_flashinfer_allreduce_fusion",
    "--api-key": "api_key",
    "--speculative-algorithm": "speculative",
    "--speculative-num-steps": "speculative",
    "--speculative-eagle-topk": "speculative",
    "--speculative-num-draft-tokens": "speculative",
    "--speculative-draft-model-path": "speculative",
}
# The variable behind a rendered flag, for error messages (the first key of MANAGED_FLAGS wins).
FLAG_VARIABLE: dict[str, str] = {}
for _flag, _key in MANAGED_FLAGS.items():
    FLAG_VARIABLE.setdefault(_flag, _key)


@dataclass
class Rendered:
    """The argv plus everything the role prints or asserts about it."""

    argv: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    radix_cache_disabled: bool = False
    radix_cache_reason: str = ""
    table: str = ""  # which release's flag table checked the argv
    env: dict[str, str] = field(default_factory=dict)  # SGLang switches the settings turn on
    kv_cache_fp8: bool = False  # the KV cache SGLang will use is FP8 (resolved, not as spelled)

    def as_dict(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "errors": self.errors,
            "warnings": self.warnings,
            "radix_cache_disabled": self.radix_cache_disabled,
            "radix_cache_reason": self.radix_cache_reason,
            "flag_table": self.table,
            "env": self.env,
            "kv_cache_fp8": self.kv_cache_fp8,
        }


@functools.lru_cache(maxsize=64)
def flag_table(version: str) -> tuple[dict[str, Any] | None, str]:
    """The flag table for ``version``: its own, else the newest older one (with a note); None if none fits."""
    return flagtable.load(version)


def parse_version(text: Any) -> tuple[int, ...] | None:
    """``"0.5.23.post1"`` -> ``(0, 5, 23)``; ``None`` when there is no usable version."""
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    if not match:
        return None
    return tuple(int(part) for part in match.groups(default="0"))


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _as_int(
    settings: dict[str, Any], key: str, errors: list[str], minimum: int = 1, maximum: int | None = None
) -> int | None:
    value = settings.get(key)
    if _empty(value):
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(str(value).strip())
    except ValueError:
        errors.append(f"{PREFIX}{key} must be an integer, got {value!r}")
        return None
    upper = f"..{maximum}" if maximum is not None else " or more"
    if number < minimum or (maximum is not None and number > maximum):
        errors.append(f"{PREFIX}{key} must be in {minimum}{upper}, got {number}")
        return None
    return number


def _as_bool(settings: dict[str, Any], key: str, errors: list[str]) -> bool:
    value = settings.get(key, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0", "", "none"):
        return False
    errors.append(f"{PREFIX}{key} must be true or false, got {value!r}")
    return False


def _choice(settings: dict[str, Any], key: str, errors: list[str]) -> str:
    value = "" if _empty(settings.get(key)) else str(settings.get(key)).strip()
    allowed = CHOICES[key]
    if value not in allowed:
        shown = ", ".join(repr(v) if v == "" else v for v in allowed)
        errors.append(f"{PREFIX}{key} must be one of: {shown}; got {value!r}")
    return value


def check_settings(settings: dict[str, Any], gpu_count: Any = None) -> list[str]:
    """Static checks that need neither the host nor the image: run in preflight."""
    errors: list[str] = []
    if _empty(settings.get("model_path")):
        errors.append(f"{PREFIX}model_path must be set (a path inside the container or a model id)")
    for key in CHOICES:
        _choice(settings, key, errors)
    tp_size = _as_int(settings, "tp_size", errors)
    if tp_size is None and not any("tp_size" in e for e in errors):
        errors.append(f"{PREFIX}tp_size must be set (1 or more)")
    gpus: int | None = None
    try:
        gpus = None if _empty(gpu_count) else int(str(gpu_count))
    except ValueError:
        errors.append(f"sglang_gpu_count must be an integer, got {gpu_count!r}")
    if tp_size and gpus is not None:
        if gpus < 1:
            errors.append(f"sglang_gpu_count must be 1 or more, got {gpus}")
        elif tp_size > gpus or gpus % tp_size:
            divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
            errors.append(
                f"{PREFIX}tp_size={tp_size} must divide sglang_gpu_count={gpus}; "
                f"allowed values: {', '.join(map(str, divisors))}"
            )
    _as_int(settings, "port", errors, 1, 65535)
    for key in ("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs", "stream_interval"):
        _as_int(settings, key, errors)
    fraction = settings.get("mem_fraction_static")
    if not _empty(fraction):
        try:
            value = float(str(fraction))
            if not 0.0 < value < 1.0:
                raise ValueError
        except ValueError:
            errors.append(f"{PREFIX}mem_fraction_static must be a number in (0, 1), got {fraction!r}")
    for key in (
        "disable_cuda_graph",
        "enable_metrics",
        "trust_remote_code",
        "disable_custom_all_reduce",
        "disable_shared_experts_fusion",
        "enable_flashinfer_allreduce_fusion",
    ):
        _as_bool(settings, key, errors)
    if _as_bool(settings, "disable_cuda_graph", []) and not _empty(settings.get("cuda_graph_max_bs")):
        errors.append(
            f"{PREFIX}cuda_graph_max_bs is set while {PREFIX}disable_cuda_graph is true: "
            "contradictory, unset one of them"
        )
    _check_speculative(settings.get("speculative"), errors)
    _as_bool(settings, "pcie_ipc_allreduce", errors)
    extra = settings.get("extra_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str | int | float) for a in extra):
        errors.append(f"{PREFIX}extra_args must be a list of strings, got {extra!r}")
    else:
        for arg in extra:
            flag = str(arg).split("=", 1)[0]
            owner = MANAGED_FLAGS.get(flag)
            if owner == "radix_cache":
                errors.append(
                    f"{PREFIX}extra_args contains {flag}: use {PREFIX}radix_cache "
                    "(auto | enabled | disabled) instead, so it cannot contradict the patch record"
                )
            elif owner:
                errors.append(f"{PREFIX}extra_args contains {flag}, which {PREFIX}{owner} already controls")
    return errors


def _check_speculative(spec: Any, errors: list[str]) -> None:
    """sglang_server_speculative: {algorithm, num_steps, eagle_topk, num_draft_tokens, draft_model_path}."""
    var = f"{PREFIX}speculative"
    if spec in (None, "", {}):
        return
    if not isinstance(spec, dict):
        errors.append(f"{var} must be a mapping (algorithm, num_steps, eagle_topk, num_draft_tokens), got {spec!r}")
        return
    unknown = sorted(set(spec) - {"algorithm", *SPECULATIVE_INTS, "draft_model_path"})
    if unknown:
        errors.append(
            f"{var} has unknown keys {unknown}: allowed algorithm, num_steps, eagle_topk, num_draft_tokens, "
            "draft_model_path"
        )
    algorithm = "" if _empty(spec.get("algorithm")) else str(spec.get("algorithm")).strip()
    if algorithm not in SPECULATIVE_ALGORITHMS:
        errors.append(f"{var}.algorithm must be one of: '', {', '.join(SPECULATIVE_ALGORITHMS[1:])}; got {algorithm!r}")
    numbers = {k: spec.get(k) for k in SPECULATIVE_INTS if not _empty(spec.get(k))}
    for key, value in numbers.items():
        if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value)) < 1:
            errors.append(f"{var}.{key} must be an integer of 1 or more, got {value!r}")
    if not algorithm and (numbers or not _empty(spec.get("draft_model_path"))):
        errors.append(f"{var} sets {', '.join(sorted(numbers)) or 'draft_model_path'} without an algorithm")


def _kv_cache_fp8(settings: dict[str, Any], arch: str) -> bool:
    """Whether the KV cache SGLang uses will be FP8: as spelled, or ``auto`` on Blackwell.

    SGLang (0.5.17 and 0.5.23, read by tests/sglang_real) turns ``--kv-cache-dtype auto`` into
    ``fp8_e4m3`` for DSA models when the GPU's compute major is 10 or more ("Setting KV cache dtype
    to fp8_e4m3 for DeepSeek DSA on SM12 device"). The bundle serves GLM-5 (a DSA model), so on
    sm_100/sm_120 ``auto`` is FP8 for the DSA guard's fallback.
    """
    dtype = str(settings.get("kv_cache_dtype") or "auto").strip()
    if dtype.startswith("fp8"):
        return True
    return dtype == "auto" and arch.isdigit() and int(arch) >= 100


def _guard_status(patch_record: Any) -> str:
    if not isinstance(patch_record, dict) or not patch_record:
        return "missing"
    fix = (patch_record.get("fixes") or {}).get(GUARD_FIX)
    if not isinstance(fix, dict):
        return "missing"
    return str(fix.get("status", "missing"))


def _variable(flag: str) -> str:
    owner = FLAG_VARIABLE.get(flag)
    return f"{PREFIX}{owner}" if owner else f"{PREFIX}extra_args ({flag})"


def check_against_table(argv: list[str], table: dict[str, Any], version: str) -> tuple[list[str], list[str]]:
    """(errors, warnings): each flag must exist in the release and each value be one of its choices."""
    errors: list[str] = []
    warnings: list[str] = []
    for p in flagtable.check(argv, table):
        var = _variable(p.flag)
        if p.kind == "unknown":
            errors.append(f"{var}: SGLang {version} has no flag {p.flag} (launch_server would exit 2)")
        elif p.kind == "choice":
            errors.append(f"{var}={p.value} is refused by SGLang {version} {p.flag} (allowed: {p.detail})")
        elif p.kind == "deprecated":
            instead = f"; use {p.detail}" if p.detail else ""
            warnings.append(f"{var}: {p.flag} is deprecated in SGLang {version}{instead}")
        else:
            glm = " (the GLM-4.5 detector; GLM-5 uses glm47)" if p.flag == "--tool-call-parser" else ""
            warnings.append(f"{var}={p.value} is deprecated in SGLang {version}: it is rewritten to {p.detail!r}{glm}")
    return errors, warnings


def _has(table: dict[str, Any] | None, flag: str) -> bool:
    return bool(table) and flag in table["flags"] and not table["flags"][flag].get("deprecated")


def render_argv(
    settings: dict[str, Any], sglang_version: Any = None, patch_record: Any = None, gpu_arch: Any = None
) -> Rendered:
    """Render the argv for one SGLang version, image patch record and GPU arch."""
    out = Rendered(errors=check_settings(settings))
    version = parse_version(sglang_version)
    table, note = flag_table(str(sglang_version)) if version is not None else (None, "")
    if version is not None and table is None:
        out.errors.append(f"{PREFIX}sglang_version: {note}")
    elif note:
        out.warnings.append(note)
    out.table = table["sglang_version"] if table else ""
    arch = re.sub(r"\D", "", str(gpu_arch or ""))
    argv = out.argv

    def add(flag: str, key: str) -> None:
        value = settings.get(key)
        if not _empty(value):
            argv.extend([flag, str(value).strip()])

    def switch(flag: str, key: str) -> None:
        if _as_bool(settings, key, []):
            argv.append(flag)

    add("--model-path", "model_path")
    add("--served-model-name", "served_model_name")
    add("--tp-size", "tp_size")
    add("--quantization", "quantization")
    add("--kv-cache-dtype", "kv_cache_dtype")
    add("--attention-backend", "attention_backend")

    dsa_set = [k for k in ("dsa_prefill_backend", "dsa_decode_backend") if not _empty(settings.get(k))]
    graph_bs_set = not _empty(settings.get("cuda_graph_max_bs"))
    if version is None and (dsa_set or graph_bs_set):
        needs = ", ".join(PREFIX + k for k in [*dsa_set, *(["cuda_graph_max_bs"] if graph_bs_set else [])])
        out.errors.append(
            f"the image has no io.sglang-deploy.sglang.version label ({sglang_version!r}) and {needs} "
            f"render differently per SGLang version: set {PREFIX}sglang_version"
        )
    # --nsa-* was the real name up to 0.5.12.post1; 0.5.13 added --dsa-* (nsa a deprecated alias);
    # --nsa-* is gone from 0.5.20: the release's table says which it has.
    dsa_word = "dsa" if table is None or _has(table, "--dsa-prefill-backend") else "nsa"
    add(f"--{dsa_word}-prefill-backend", "dsa_prefill_backend")
    add(f"--{dsa_word}-decode-backend", "dsa_decode_backend")
    add("--moe-runner-backend", "moe_runner_backend")
    add("--max-running-requests", "max_running_requests")
    add("--mem-fraction-static", "mem_fraction_static")
    add("--chunked-prefill-size", "chunked_prefill_size")
    switch("--disable-cuda-graph", "disable_cuda_graph")
    # --cuda-graph-max-bs-decode appeared in 0.5.14 (the old name became its deprecated alias) and the
    # old name is gone from 0.5.20: the release's table says which it has.
    new_graph = table is None or _has(table, "--cuda-graph-max-bs-decode")
    graph_flag = "--cuda-graph-max-bs-decode" if new_graph else "--cuda-graph-max-bs"
    add(graph_flag, "cuda_graph_max_bs")
    add("--stream-interval", "stream_interval")
    spec = settings.get("speculative") if isinstance(settings.get("speculative"), dict) else {}
    if not _empty(spec.get("algorithm")):
        argv.extend(["--speculative-algorithm", str(spec["algorithm"]).strip()])
        for key in SPECULATIVE_INTS:
            if not _empty(spec.get(key)):
                argv.extend([f"--speculative-{key.replace('_', '-')}", str(spec[key]).strip()])
        if not _empty(spec.get("draft_model_path")):
            argv.extend(["--speculative-draft-model-path", str(spec["draft_model_path"]).strip()])
    switch("--enable-metrics", "enable_metrics")
    switch("--trust-remote-code", "trust_remote_code")
    add("--reasoning-parser", "reasoning_parser")
    add("--tool-call-parser", "tool_call_parser")
    switch("--disable-custom-all-reduce", "disable_custom_all_reduce")
    switch("--disable-shared-experts-fusion", "disable_shared_experts_fusion")
    if _as_bool(settings, "enable_flashinfer_allreduce_fusion", []):
        if arch == "120":
            out.warnings.append(
                f"{PREFIX}enable_flashinfer_allreduce_fusion is a no-op on sm_120 (RTX PRO 6000): not rendered"
            )
        elif table is not None and "--flashinfer-allreduce-fusion-backend" in table["flags"]:
            # --enable-flashinfer-allreduce-fusion is deprecated there: "use --flashinfer-allreduce-fusion-backend=auto"
            argv.extend(["--flashinfer-allreduce-fusion-backend", "auto"])
        else:
            argv.append("--enable-flashinfer-allreduce-fusion")

    # Without the image's DSA guard, FP8 DSA prefill crashes whenever the MHA one-shot path runs
    # with a prefix: SGLang's dispatch (deepseek_common/attention_backend_handler.py) takes it when
    # sum(prefix) >= SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD and not disable_chunked_prefix_cache, or
    # when there is no prefix at all. Chunked prefill gives later chunks of a long prompt a prefix
    # even without the radix cache, so --disable-radix-cache does not avoid it;
    # --disable-chunked-prefix-cache leaves only the prefix-free case, which never reads the page
    # table. So that is the fallback, and the radix cache is kept.
    radix = str(settings.get("radix_cache") or "auto").strip()
    guard = _guard_status(patch_record)
    guard_missing = guard in ("absent", "missing")
    fp8_kv = out.kv_cache_fp8 = _kv_cache_fp8(settings, arch)
    if guard_missing and fp8_kv:
        argv.append("--disable-chunked-prefix-cache")
        out.warnings.append(
            f"patch record: {GUARD_FIX} is {guard}: --disable-chunked-prefix-cache added so FP8 DSA prefill "
            "never reads page_table_1_flattened (the radix cache stays on)"
        )
    if radix == "disabled":
        out.radix_cache_disabled = True
        out.radix_cache_reason = f"{PREFIX}radix_cache=disabled (guard status: {guard})"
        argv.append("--disable-radix-cache")
    elif guard_missing and fp8_kv:
        out.radix_cache_reason = f"patch record: {GUARD_FIX} is {guard}; radix cache kept, chunked prefix cache off"
    else:
        out.radix_cache_reason = f"patch record: {GUARD_FIX} is {guard}; radix cache kept"

    add("--host", "listen_host")
    add("--port", "port")
    argv.extend(str(a) for a in settings.get("extra_args") or [] if isinstance(settings.get("extra_args"), list))
    if table is not None:
        errors, warnings = check_against_table(argv, table, table["sglang_version"])
        out.errors += errors
        out.warnings += warnings
    _render_env(settings, table, out)
    return out


def _render_env(settings: dict[str, Any], table: dict[str, Any] | None, out: Rendered) -> None:
    """SGLang's environment switches the settings turn on, where the release reads them."""
    known = (table or {}).get("environment")
    version = (table or {}).get("sglang_version", "?")
    if _as_bool(settings, "pcie_ipc_allreduce", []):
        if known is None:
            out.warnings.append(
                f"{PREFIX}pcie_ipc_allreduce: the SGLang version is unknown; {PCIE_IPC_ENV}=1 set (read from 0.5.21)"
            )
            out.env[PCIE_IPC_ENV] = "1"
        elif PCIE_IPC_ENV in known:
            out.env[PCIE_IPC_ENV] = "1"
        else:
            out.warnings.append(
                f"{PREFIX}pcie_ipc_allreduce: SGLang {version} has no {PCIE_IPC_ENV} (0.5.21 and later): not set, "
                "all-reduce stays on NCCL / custom all-reduce"
            )
    env = settings.get("env") if isinstance(settings.get("env"), dict) else {}
    for name in sorted(env):
        if known is not None and str(name).startswith("SGLANG_") and str(name) not in known:
            out.warnings.append(
                f"{PREFIX}env: {name} is not one of SGLang {version}'s declared switches (its environ.py): "
                "a typo, or another release's switch?"
            )


def sglang_server_check(settings: dict[str, Any], gpu_count: Any = None, sglang_version: Any = None) -> list[str]:
    """Filter: static errors for preflight (empty list when the settings are fine).

    With a known SGLang version every rendered flag and value is checked against that
    release's table too (what launch_server would refuse), before any host changes.
    """
    errors = check_settings(settings, gpu_count)
    if not errors and parse_version(sglang_version) is not None:
        errors = [e for e in render_argv(settings, sglang_version, {}, None).errors if e not in errors]
    return errors


def sglang_server_deprecations(settings: dict[str, Any], sglang_version: Any = None) -> list[str]:
    """Filter: deprecated flags and values for preflight's warning (no host needed).

    With a known version, that release's table decides; without one, the newest table does
    (``glm45`` as tool-call parser is deprecated in every release 0.5.9-0.5.23).
    """
    version = str(sglang_version) if parse_version(sglang_version) is not None else _newest_table_version()
    if not version:
        return []
    return [
        w
        for w in render_argv(settings, version, {"fixes": {GUARD_FIX: {"status": "applied"}}}, None).warnings
        if "deprecated" in w
    ]


def _newest_table_version() -> str:
    names = [p.name[len("sglang-") : -len(".json")] for p in flagtable.TABLES.glob("sglang-*.json")]
    return max(names, key=flagtable.version_key) if names else ""


def sglang_server_argv(
    settings: dict[str, Any], sglang_version: Any = None, patch_record: Any = None, gpu_arch: Any = None
) -> dict[str, Any]:
    """Filter: ``{argv, errors, warnings, radix_cache_disabled, radix_cache_reason}``."""
    return render_argv(settings, sglang_version, patch_record, gpu_arch).as_dict()


def sglang_server_str_values(mapping: dict[str, Any]) -> dict[str, str]:
    """Filter: docker wants string env values; YAML turns ``1`` and ``true`` into other types."""

    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return {str(key): text(value) for key, value in (mapping or {}).items()}


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "sglang_server_check": sglang_server_check,
            "sglang_server_deprecations": sglang_server_deprecations,
            "sglang_server_argv": sglang_server_argv,
            "sglang_server_str_values": sglang_server_str_values,
        }
