"""Simulated FlashInfer JIT/autotune cache, so the roles' cache volume can be tested in CI.

A real first start compiles kernels into ``<cache>/<fi-version>/<arch>/cached_ops``
and writes autotune results; a later start with the folder mounted skips that, unless it needs
modules the earlier one did not build: another SGLang release or other kernel settings under the
same FlashInfer (``sglangflags.kernel_build``). The test engine copies the shape: no marker, or a
marker without this start's build -> "cold" (sleep ``cold_start_s``, then write a few small files,
every one saying it is a test-engine file, among them a placeholder
``cached_ops/<module>/<module>.so`` per build, which is what the roles look for); else "warm".
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass

log = logging.getLogger("testengine")

MARKER = ".test-engine-cache.json"
_NOTE = "Written by the SGLang-compatible TEST ENGINE (CI), not by FlashInfer. Safe to delete.\n"


@dataclass
class CacheState:
    """Where the cache lives and whether this start found it warm."""

    root: str
    version: str
    arch: str
    cold: bool
    build: str = ""

    @property
    def state(self) -> str:
        return "cold" if self.cold else "warm"

    @property
    def arch_dir(self) -> str:
        return os.path.join(self.root, self.version, self.arch)

    @classmethod
    def probe(cls, root: str, version: str, arch: str, build: str = "") -> CacheState:
        builds = cls._builds(os.path.join(root, version, arch, MARKER))
        state = cls(root=root, version=version, arch=arch, cold=builds is None or build not in builds, build=build)
        log.info("flashinfer cache: %s (%s, build %s)", state.state, state.arch_dir, build or "-")
        return state

    @staticmethod
    def _builds(marker: str) -> list[str] | None:
        """The builds the marker lists (None: no marker); an old marker without builds holds ``""``."""
        try:
            with open(marker) as f:
                return list(json.load(f).get("builds", [""]))
        except (OSError, ValueError):
            return None

    def populate(self) -> None:
        """Write FlashInfer-shaped files and the marker; a read-only cache only logs a warning."""
        try:
            module = "test_engine_fused_moe_" + ("".join(c if c.isalnum() else "_" for c in self.build) or "sm120")
            ops = os.path.join(self.arch_dir, "cached_ops", module)
            os.makedirs(ops, exist_ok=True)
            with open(os.path.join(ops, "README.test-engine"), "w") as f:
                f.write(_NOTE)
            # FlashInfer's built module is cached_ops/<module>/<module>.so, and that file is
            # what the roles count as "warm" (docs/flashinfer-cache.md). This one is a text
            # placeholder with the same name: nothing here loads it.
            with open(os.path.join(ops, f"{module}.so"), "w") as f:
                f.write("placeholder, not a shared object. " + _NOTE)
            tune = os.path.join(self.arch_dir, "autotune")
            os.makedirs(tune, exist_ok=True)
            with open(os.path.join(tune, "test-engine-autotune.json"), "w") as f:
                json.dump({"test_engine": True, "note": _NOTE.strip(), "tactics": {}}, f)
            builds = sorted({*(self._builds(os.path.join(self.arch_dir, MARKER)) or []), self.build})
            with open(os.path.join(self.arch_dir, MARKER), "w") as f:
                json.dump({"test_engine": True, "written_at": time.time(), "builds": builds, "note": _NOTE.strip()}, f)
        except OSError as exc:
            log.warning("flashinfer cache: could not write %s: %s", self.arch_dir, exc)
