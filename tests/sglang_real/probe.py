"""What a real SGLang release makes of a ``launch_server`` argv on a given GPU: run in the CPU venv.

Run by tests/sglang_real/ with the interpreter of the CPU environment that
``tests/sglang_real/cpu_env.sh`` builds (CPU PyTorch, one release's real wheel unpacked on
PYTHONPATH). Only the device facts are patched: CUDA is "available" with the given compute
capability, GPU count and memory, in torch and in an ``nvidia-smi`` on PATH. Nothing of SGLang is
replaced: its own parser reads the argv, its own ``ServerArgs`` resolves it (``prepare_server_args``,
then ``resolve_once`` where the release has it) against the model folder's config.json.

Prints one JSON object: the parser's flags (``--flag`` -> takes a value, action, deprecated),
the resolved settings this project's profiles depend on, and what SGLang logged while resolving.

    python probe.py --capability 12.0 --gpus 8 --memory-gib 96 -- --model-path DIR --tp-size 8 ...
    python probe.py --capability 10.0 --memory-gib 180 --cases cases.json     # {name: argv}, one process
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import logging
import os
import stat
import sys
import tempfile
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# The settings a GPU profile fixes; read with getattr, so a field one release lacks is None.
RESOLVED = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "dsa_prefill_backend",
    "dsa_decode_backend",
    "nsa_prefill_backend",
    "nsa_decode_backend",
    "kv_cache_dtype",
    "page_size",
    "moe_runner_backend",
    "moe_a2a_backend",
    "quantization",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "speculative_moe_runner_backend",
    "speculative_moe_a2a_backend",
    "enable_flashinfer_allreduce_fusion",
    "flashinfer_allreduce_fusion_backend",
    "disable_custom_all_reduce",
    "disable_shared_experts_fusion",
    "disable_radix_cache",
    "disable_chunked_prefix_cache",
    "chunked_prefill_size",
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "max_running_requests",
    "tp_size",
    "enable_dp_attention",
)


# GPU-only packages the release imports at module level once CUDA is "available" (sglang-kernel's
# ops, torchvision's image decoders; never called while arguments resolve). Their CPU wheels do not
# exist or do not load beside CPU torch, so each is a stand-in whose every attribute is a placeholder
# that refuses to be called. SGLang itself is never stood in for.
STAND_INS = ("sgl_kernel", "torchvision")


class _Placeholder:
    """Any attribute of a stand-in: callable and subscriptable only to say it is not real."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} is a stand-in (tests/sglang_real/probe.py): not callable on CPU")

    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._name}.{name}")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``STAND_INS`` (and any submodule of them) as modules of placeholders."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in STAND_INS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []  # a package: submodules resolve through this finder too
        module.__version__ = "0.0.0+stand-in"
        module.__file__ = f"<stand-in {spec.name}>"

        def attribute(name: str) -> _Placeholder:
            if name.startswith("__"):
                raise AttributeError(name)
            return _Placeholder(f"{spec.name}.{name}")

        module.__getattr__ = attribute  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


# Environment switches the profiles set (read back through SGLang's own envs).
ENV_SWITCHES = ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",)


def fake_devices(capability: tuple[int, int], gpus: int, memory_gib: float, name: str) -> None:
    """CUDA as SGLang asks for it (torch.cuda.*, torch.version.cuda, nvidia-smi), nothing else."""
    import torch

    total = int(memory_gib * (1 << 30))
    props = SimpleNamespace(
        name=name,
        major=capability[0],
        minor=capability[1],
        total_memory=total,
        multi_processor_count=188,
        L2_cache_size=128 << 20,
        warp_size=32,
    )
    torch.version.cuda = "13.0"
    torch.cuda.is_available = lambda: True
    torch.cuda.is_initialized = lambda: True
    torch.cuda.device_count = lambda: gpus
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: capability
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.mem_get_info = lambda device=None: (total - (1 << 30), total)
    # nvidia-smi answers the queries SGLang makes (memory.total, compute_cap, name, count)
    bindir = Path(tempfile.mkdtemp(prefix="fake-nvidia-smi-"))
    mib = int(memory_gib * 1024)
    script = bindir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *memory.total*) i=0; while [ $i -lt {gpus} ]; do echo {mib}; i=$((i+1)); done;;\n"
        f"  *compute_cap*) i=0; while [ $i -lt {gpus} ]; do echo {capability[0]}.{capability[1]}; i=$((i+1)); done;;\n"
        f'  *name*) i=0; while [ $i -lt {gpus} ]; do echo "{name}"; i=$((i+1)); done;;\n'
        "  *) echo 'fake nvidia-smi (tests/sglang_real/probe.py)'; ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def parser_facts() -> dict[str, Any]:
    """Every ``--flag`` of the release's own launch_server parser."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    out: dict[str, Any] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                out[option] = {
                    "value": action.nargs != 0,
                    "action": type(action).__name__,
                    "choices": sorted(map(str, action.choices)) if action.choices is not None else None,
                }
    return out


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


def resolve(argv: list[str]) -> dict[str, Any]:
    """SGLang's own resolution of ``argv``: the settings a profile depends on, and the log."""
    from sglang.srt import server_args as sa

    collect = _Collect()
    logging.getLogger().addHandler(collect)
    logging.getLogger().setLevel(logging.INFO)
    args = sa.prepare_server_args(argv)
    view: Any = args
    if hasattr(args, "resolve_once"):
        # 0.5.2x: resolution is a pipeline whose decisions are declarations laid over the record;
        # resolved_view is what the launched server reads.
        from sglang.srt.arg_groups.model_override_base import resolved_view

        args.resolve_once()
        view = resolved_view(args)
    resolved = {name: _plain(getattr(view, name, None)) for name in RESOLVED}
    return {"resolved": resolved, "log": collect.lines}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(getattr(value, "value", value))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capability", default="12.0", help="compute capability, e.g. 12.0 (sm_120) or 10.0")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--memory-gib", type=float, default=96.0)
    ap.add_argument("--name", default="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    ap.add_argument("--cases", type=Path, help="JSON {name: argv}: resolve each (one process, one device)")
    ap.add_argument(
        "--real-kernels",
        action="store_true",
        help="import the real sgl_kernel and torchvision (inside the GPU image, with a driver stub on the "
        "loader's path) instead of the CPU venv's stand-ins",
    )
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- then one launch_server argv (without --cases)")
    opts = ap.parse_args()
    argv = opts.argv[1:] if opts.argv[:1] == ["--"] else opts.argv
    cases: dict[str, list[str]] = json.loads(opts.cases.read_text()) if opts.cases else ({"argv": argv} if argv else {})
    major, minor = (int(x) for x in opts.capability.split("."))
    if not opts.real_kernels:
        sys.meta_path.insert(0, _StandInFinder())
    else:  # the image's own kernels must load (the driver stub stands in for the driver)
        import flashinfer  # noqa: F401
        import sgl_kernel  # noqa: F401
    fake_devices((major, minor), opts.gpus, opts.memory_gib, opts.name)
    import sglang

    out: dict[str, Any] = {"sglang_version": sglang.__version__, "parser": parser_facts(), "environment": environment()}
    loaded = (*STAND_INS, "flashinfer", "torch")
    out["modules"] = {name: getattr(sys.modules.get(name), "__file__", None) for name in loaded}
    out["cases"] = {name: resolve(case) for name, case in cases.items()}
    json.dump(out, sys.stdout, sort_keys=True)
    return 0


def environment() -> dict[str, Any]:
    """The SGLANG_* switches the profiles set, as the release reads them (None: it has no such switch)."""
    try:
        from sglang.srt.environ import envs
    except ImportError:
        return {}
    return {name: (getattr(envs, name).get() if hasattr(envs, name) else None) for name in ENV_SWITCHES}


if __name__ == "__main__":
    raise SystemExit(main())
