"""Render the ``sglang_server_*`` settings into SGLang's ``launch_server`` argv and environment.

Why Python and not a Jinja template: the flag set depends on the SGLang release (renames and
removals) and on the image's patch record, and the rules need unit tests. Which flags and values
a release accepts is not guessed: ``sglangflags`` holds each release's table, read from its
wheel (images/flags/extract.py). The renderer picks the flag names the release has (``--dsa-*``
vs ``--nsa-*``, ``--cuda-graph-max-bs-decode``, ``--flashinfer-allreduce-fusion-backend``) and
refuses any flag or value the release's ``launch_server`` would refuse, naming the variable, the
version and the allowed values.

Both the production image (``python3 -m sglang.launch_server``) and the test engine
(``python3 -m testengine``) receive the same argv (docs/architecture.md).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import sglangflags as flagtable

from .settings import MANAGED_FLAGS, PREFIX, SPECULATIVE_INTS, as_bool, check_settings, is_empty

GUARD_FIX = "dsa-fp8-page-table-guard"
# FlashInfer's PCIe IPC all-reduce for GPUs without NVLink: an environment switch of SGLang >= 0.5.21.
PCIE_IPC_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"


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
    owner = MANAGED_FLAGS.get(flag)
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
        if not is_empty(value):
            argv.extend([flag, str(value).strip()])

    def switch(flag: str, key: str) -> None:
        if as_bool(settings, key):
            argv.append(flag)

    add("--model-path", "model_path")
    add("--served-model-name", "served_model_name")
    add("--tp-size", "tp_size")
    add("--quantization", "quantization")
    add("--kv-cache-dtype", "kv_cache_dtype")
    add("--attention-backend", "attention_backend")

    dsa_set = [k for k in ("dsa_prefill_backend", "dsa_decode_backend") if not is_empty(settings.get(k))]
    graph_bs_set = not is_empty(settings.get("cuda_graph_max_bs"))
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
    if not is_empty(spec.get("algorithm")):
        argv.extend(["--speculative-algorithm", str(spec["algorithm"]).strip()])
        for key in SPECULATIVE_INTS:
            if not is_empty(spec.get(key)):
                argv.extend([f"--speculative-{key.replace('_', '-')}", str(spec[key]).strip()])
        if not is_empty(spec.get("draft_model_path")):
            argv.extend(["--speculative-draft-model-path", str(spec["draft_model_path"]).strip()])
    switch("--enable-metrics", "enable_metrics")
    switch("--trust-remote-code", "trust_remote_code")
    add("--reasoning-parser", "reasoning_parser")
    add("--tool-call-parser", "tool_call_parser")
    switch("--disable-custom-all-reduce", "disable_custom_all_reduce")
    switch("--disable-shared-experts-fusion", "disable_shared_experts_fusion")
    if as_bool(settings, "enable_flashinfer_allreduce_fusion"):
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
    version = out.table  # the release whose table checked the argv
    if as_bool(settings, "pcie_ipc_allreduce"):
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


def check(settings: dict[str, Any], gpu_count: Any = None, sglang_version: Any = None) -> list[str]:
    """Static errors for preflight (empty when the settings are fine): ``check_settings``, and with a
    known SGLang version every rendered flag and value against that release's table too (what
    launch_server would refuse), before any host changes."""
    errors = check_settings(settings, gpu_count)
    if not errors and parse_version(sglang_version) is not None:
        errors = render_argv(settings, sglang_version, {}, None).errors
    return errors


def deprecations(settings: dict[str, Any], sglang_version: Any = None) -> list[str]:
    """Deprecated flags and values, for preflight's warning (no host needed).

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


def env_strings(mapping: dict[str, Any] | None) -> dict[str, str]:
    """The container's environment as strings: docker wants string values, and YAML turns ``1`` and
    ``true`` into other types (a bool is written the way YAML and SGLang read it: ``true``)."""

    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return {str(key): text(value) for key, value in (mapping or {}).items()}
