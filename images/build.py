#!/usr/bin/env python3
"""Build the bundle's images and their offline archives: the one entry point for images/.

    python3 images/build.py sglang [--sglang-version 0.5.23 ...]   # GPU image, host with a registry
    python3 images/build.py sglang --local-cuda-base                # GPU image, no registry (cuda-base below)
    python3 images/build.py lock                                    # re-resolve images/sglang/requirements.lock
    python3 images/build.py cuda-base [--python-root PREFIX]        # the local CUDA 13.0 devel base
    python3 images/build.py sglang-cpu-test                         # CI: real patch layer, CPU base
    python3 images/build.py test-engine --release all               # local/sglang-test-engine:release-{a,b,c}
    python3 images/build.py save IMAGE --out DIR [--gzip]           # offline archive + .sha256 + .json
    python3 images/build.py verify ARCHIVE | load ARCHIVE
    python3 images/build.py seed IMAGE --archive reports/cache-archives/KEY.tar.gz --tag NEW  # kernels baked in

Builds are idempotent: each image carries ``io.sglang-deploy.source-hash`` (its staged build
context + build arguments); an image with the same hash is not rebuilt (``--force`` does).
The build context is staged in a temporary folder with only the files the Dockerfile uses,
so it is small and the hash means exactly "same inputs".
Standard library only (plus the docker CLI, and uv for ``lock``), so it runs on any build host's python3.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "patches"))

import cuda_base  # noqa: E402
import image_archive as archive  # noqa: E402
import wheelhouse  # noqa: E402
from patchset import PatchError, load_patches, run  # noqa: E402

WHEEL_CACHE = REPO / ".cache" / "wheels"
CPU_BASE = "local/debian:bookworm"
GPU_BASE = "nvidia/cuda:13.0.1-devel-ubuntu24.04"
# the registry-free stand-in for GPU_BASE (images/cuda-base/, built by `cuda-base`)
LOCAL_CUDA_BASE = "local/cuda:13.0.3-devel-py3.12"
HASH_LABEL = "io.sglang-deploy.source-hash"
# The fleet seed an image can carry (``seed``): the archive of a warm FlashInfer cache volume, the
# file the flashinfer_cache role looks for when the controller has no archive of the host's key.
SEED_DIR = "/opt/sglang-deploy/flashinfer-seed"
SEED_LABEL = "io.sglang-deploy.flashinfer.seed"


@dataclass(frozen=True)
class TestEngineRelease:
    """A test-engine image posing as one SGLang release (statuses as the real tool decides)."""

    tag: str
    sglang: str
    flashinfer: str
    cuda: str
    fixes: dict[str, str]

    @property
    def patches(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.fixes.items()))


TEST_ENGINE_RELEASES = {
    # the seed-era release: both fixes are ours
    "a": TestEngineRelease(
        "release-a",
        "0.5.9",
        "0.6.3",
        "12.9",
        {"autotune-flashinfer-cutlass": "applied", "dsa-fp8-page-table-guard": "applied"},
    ),
    # the newest release scanned: autotune is upstream, the DSA guard still ours
    "b": TestEngineRelease(
        "release-b",
        "0.5.23",
        "0.7.2",
        "13.0",
        {"autotune-flashinfer-cutlass": "upstream", "dsa-fp8-page-table-guard": "applied"},
    ),
    # a release beyond every patch range: no guard, so the roles must add --disable-chunked-prefix-cache;
    # FlashInfer as release-b's, so b -> c is a new SGLang release under the same cache key
    "c": TestEngineRelease(
        "release-c",
        "0.5.24",
        "0.7.2",
        "13.0",
        {"autotune-flashinfer-cutlass": "upstream", "dsa-fp8-page-table-guard": "absent"},
    ),
}
TEST_ENGINE_REPO = "local/sglang-test-engine"


class BuildError(Exception):
    """A build step that failed; the message says which and what to do."""


def log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def ensure_wheel(dist: str, version: str) -> Path:
    """The cached wheel of ``dist==version``; downloaded once into .cache/wheels (no deps)."""
    stem = dist.replace("-", "_")
    found = sorted(WHEEL_CACHE.glob(f"{stem}-{version}-*.whl"))
    if found:
        return found[0]
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    log(f"downloading {dist}=={version} (no deps) into {WHEEL_CACHE}")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            f"{dist}=={version}",
            "-d",
            str(WHEEL_CACHE),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = sorted(WHEEL_CACHE.glob(f"{stem}-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        raise BuildError(f"could not download {dist}=={version} from PyPI: {proc.stderr.strip()[-500:]}")
    return found[0]


# pydantic 2 for the gate in the test-engine image (bookworm packages 1.10); its needs, pinned; and
# google-re2, the linear-time engine the gate runs users' patterns with (validate/userregex.py).
GATE_WHEELS = ("pydantic==2.12.5", "pydantic-core==2.41.5", "annotated-types==0.7.0",
               "typing-inspection==0.4.2", "typing-extensions==4.15.0", "google-re2==1.1.20251105")  # fmt: skip


def ensure_gate_wheels() -> list[Path]:
    """The cp311 (bookworm's Python) wheels of GATE_WHEELS, downloaded once into .cache/wheels.

    Downloaded here, not by pip inside the build: the build container neither shares this
    machine's pip configuration (mirrors, proxy certificates) nor needs a network for it.
    """
    target = WHEEL_CACHE / "gate-cp311"
    stems = [spec.split("==")[0].replace("-", "_") + "-" + spec.split("==")[1] for spec in GATE_WHEELS]
    found = [sorted(target.glob(f"{stem}-*.whl")) for stem in stems]
    if all(found):
        return [f[0] for f in found]
    target.mkdir(parents=True, exist_ok=True)
    arch = platform.machine()
    log(f"downloading the gate's wheels for Python 3.11 ({', '.join(GATE_WHEELS)}) into {target}")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11", "--implementation", "cp", "-d", str(target)]  # fmt: skip
    for tag in (f"manylinux2014_{arch}", f"manylinux_2_17_{arch}", f"manylinux_2_28_{arch}"):
        cmd += ["--platform", tag]
    proc = subprocess.run([*cmd, *GATE_WHEELS], capture_output=True, text=True, check=False)
    found = [sorted(target.glob(f"{stem}-*.whl")) for stem in stems]
    if proc.returncode != 0 or not all(found):
        raise BuildError(f"could not download {', '.join(GATE_WHEELS)} from PyPI: {proc.stderr.strip()[-500:]}")
    return [f[0] for f in found]


def expected_patches(sglang_wheel: Path, version: str) -> str:
    """The patch label the image build will produce, decided on the wheel before building."""
    patches = load_patches(HERE / "patches")
    wanted = {c.file for p in patches for c in p.changes} | {f for p in patches for f in p.upstream_files}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(sglang_wheel) as zf:
        zf.extractall(tmp, [n for n in zf.namelist() if n in wanted])
        (Path(tmp) / "sglang").mkdir(exist_ok=True)
        return run(patches, Path(tmp), version, "unknown", dry_run=True).label()


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def source_hash(ctx: Path, build_args: dict[str, str]) -> str:
    """sha256 over the staged context (paths and contents) and the build arguments."""
    h = hashlib.sha256()
    for path in sorted(p for p in ctx.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(ctx)).encode() + b"\0" + archive.sha256_file(path).encode() + b"\n")
    for key in sorted(build_args):
        h.update(f"{key}={build_args[key]}\n".encode())
    return h.hexdigest()


def _image_label(tag: str, label: str) -> str | None:
    proc = subprocess.run(
        ["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{label}"}}}}', tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def _vcs_ref() -> str:
    proc = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def docker_build(
    ctx: Path,
    dockerfile: str,
    tag: str,
    build_args: dict[str, str],
    *,
    force: bool,
    network: str | None = None,
    transport_args: dict[str, str] | None = None,
    no_cache: bool = False,
) -> bool:
    """Build unless an image with the same source hash exists; True when it built.

    ``transport_args`` (where the wheels come from: a wheelhouse URL) are build arguments that do
    not change what is built, so they are not part of the source hash."""
    digest = source_hash(ctx, build_args)
    if not force and _image_label(tag, HASH_LABEL) == digest:
        log(f"{tag}: up to date (source hash {digest[:12]}), not rebuilt")
        return False
    args = {
        **build_args,
        **(transport_args or {}),
        "SOURCE_HASH": digest,
        "VCS_REF": _vcs_ref(),
        "BUILD_DATE": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    cmd = ["docker", "build", "-f", str(ctx / dockerfile), "-t", tag, *(["--network", network] if network else [])]
    cmd += ["--no-cache"] if no_cache else []
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    cmd.append(str(ctx))
    log(f"{tag}: building ({dockerfile}, source hash {digest[:12]}); docker's progress follows")
    started = time.monotonic()
    # The classic builder: BuildKit needs buildx with a 23+ CLI, which build hosts may lack,
    # and the Dockerfiles use no BuildKit-only feature.
    env = {**os.environ, "DOCKER_BUILDKIT": os.environ.get("DOCKER_BUILDKIT", "0")}
    proc = subprocess.run(cmd, env=env, check=False, stdout=sys.stderr)
    if proc.returncode != 0:
        raise BuildError(f"{tag}: docker build failed (exit {proc.returncode}); the step's output is above")
    log(f"{tag}: built in {time.monotonic() - started:.0f}s")
    return True


def _stage_validate(ctx: Path, build_args: dict[str, str]) -> None:
    """validate/ goes into every serving image (the gate runs next to the server); its version
    label is the hash of its sources, so a report can say which gate judged it."""
    h = hashlib.sha256()
    for src in sorted((REPO / "validate").rglob("*")):
        if src.is_file() and "__pycache__" not in src.parts and src.suffix != ".pyc":
            rel = src.relative_to(REPO / "validate")
            _link_or_copy(src, ctx / "validate" / rel)
            h.update(str(rel).encode() + b"\0" + archive.sha256_file(src).encode() + b"\n")
    build_args["VALIDATE_VERSION"] = h.hexdigest()[:16]


def _stage_patches(ctx: Path) -> None:
    for name in ("apply.py", "patchset.py"):
        _link_or_copy(HERE / "patches" / name, ctx / "patches" / name)
    for manifest in sorted((HERE / "patches").glob("*/manifest.toml")):
        _link_or_copy(manifest, ctx / "patches" / manifest.parent.name / "manifest.toml")


def build_sglang(args: argparse.Namespace) -> str:
    """The production Dockerfile, GPU or CPU-test variant (same file, same patch layer).

    GPU mode installs images/sglang/requirements.lock (checked here first: a lock of another release
    fails before docker starts). ``--local-cuda-base`` builds FROM the local CUDA base (made when
    missing) and, like ``--wheelhouse``, installs from the lock's wheels downloaded on this host and
    served to the build on 127.0.0.1 (the build container shares neither this host's pip settings
    nor its proxy certificates)."""
    if args.install_mode == "cpu-test" or args.patches is None:
        wheel = ensure_wheel("sglang", args.sglang_version)
        patches = args.patches if args.patches is not None else expected_patches(wheel, args.sglang_version)
    else:
        patches = args.patches
    gpu = args.install_mode == "gpu"
    if gpu:
        wheelhouse.check_release(wheelhouse.read_lock(), args.sglang_version, args.flashinfer_version)
    base = args.base
    if getattr(args, "local_cuda_base", False):
        base = ensure_cuda_base(args.python_root, force=False)
    use_wheelhouse = gpu and (getattr(args, "wheelhouse", False) or getattr(args, "local_cuda_base", False))
    build_args = {
        "BASE_IMAGE": base,
        "INSTALL_MODE": args.install_mode,
        "SGLANG_VERSION": args.sglang_version,
        "FLASHINFER_VERSION": args.flashinfer_version,
        "CUDA_RELEASE": args.cuda_version,
        "PATCHES": patches,
    }
    if args.pip_extra_index_url:
        build_args["PIP_EXTRA_INDEX_URL"] = args.pip_extra_index_url
    if getattr(args, "with_cubins", False):
        # FlashInfer's prebuilt kernels in the image, for air-gapped B200 hosts (images/sglang/cubins.py)
        build_args |= {"FLASHINFER_CUBINS": "baked", "FLASHINFER_CUBIN_DIR": "/opt/flashinfer-cubins"}
        if args.cubins_repository:
            build_args["FLASHINFER_CUBINS_REPOSITORY"] = args.cubins_repository
    with tempfile.TemporaryDirectory(prefix="sglang-ctx-") as tmp:
        ctx = Path(tmp)
        staged = ("Dockerfile", "hashes.txt", "requirements.lock", "base_python.sh", "healthcheck.py", "launch.py",
                  "smoke.py", "allreduce_bench.py", "cache_archive.py", "cubins.py", "wheels/README.md")  # fmt: skip
        for name in staged:
            _link_or_copy(HERE / "sglang" / name, ctx / "sglang" / name)
        _stage_patches(ctx)
        _stage_validate(ctx, build_args)
        if args.install_mode == "cpu-test":
            for dist, version in (
                ("sglang", args.sglang_version),
                ("flashinfer-python", args.flashinfer_version),
            ):
                wheel = ensure_wheel(dist, version)
                _link_or_copy(wheel, ctx / "sglang" / "wheels" / wheel.name)
        if use_wheelhouse:
            log(f"the lock's wheels into {wheelhouse.WHEELHOUSE} (only missing ones are downloaded)")
            wheelhouse.download()
            with wheelhouse.serve(wheelhouse.WHEELHOUSE, args.wheelhouse_port) as url:
                log(f"serving {wheelhouse.WHEELHOUSE} at {url} to the build (--network host, --no-index)")
                docker_build(ctx, "sglang/Dockerfile", args.tag, build_args, force=args.force, network="host",
                             transport_args={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": url},
                             no_cache=args.no_cache)  # fmt: skip
        else:
            docker_build(ctx, "sglang/Dockerfile", args.tag, build_args, force=args.force, no_cache=args.no_cache)
    _maybe_archive(args, args.tag)
    return args.tag


def ensure_cuda_base(
    python_root: Path | None, *, force: bool, tag: str = LOCAL_CUDA_BASE, no_cache: bool = False
) -> str:
    """images/cuda-base/Dockerfile FROM local/debian:bookworm (made with scripts/debian-base.sh when
    missing): the CUDA wheels of the lock (downloaded first) and a CPython 3.12 tree."""
    if _image_label(CPU_BASE, HASH_LABEL) is None:
        log(f"{CPU_BASE} is missing: making it with scripts/debian-base.sh (debootstrap, about a minute)")
        proc = subprocess.run(["bash", str(REPO / "scripts" / "debian-base.sh"), "bookworm"], check=False)
        if proc.returncode != 0:
            raise BuildError(f"scripts/debian-base.sh bookworm failed (exit {proc.returncode}); its output is above")
    python = cuda_base.python_root(python_root)
    wheelhouse.download()
    with tempfile.TemporaryDirectory(prefix="cuda-base-ctx-") as tmp:
        ctx = Path(tmp)
        log(f"{tag}: CPython {wheelhouse.PYTHON} from {python}, CUDA wheels of {wheelhouse.LOCK.name}")
        cuda_base.stage(ctx, python)
        docker_build(ctx, "Dockerfile", tag, {"DEBIAN_IMAGE": CPU_BASE}, force=force, no_cache=no_cache)
    return tag


def build_test_engine(args: argparse.Namespace) -> list[str]:
    keys = sorted(TEST_ENGINE_RELEASES) if args.release == "all" else [args.release]
    if not (REPO / "testengine" / "__main__.py").is_file():
        raise BuildError(f"{REPO / 'testengine'} has no __main__.py: the test engine package is missing")
    tags = []
    with tempfile.TemporaryDirectory(prefix="test-engine-ctx-") as tmp:
        ctx = Path(tmp)
        _link_or_copy(HERE / "test-engine" / "Dockerfile", ctx / "images" / "test-engine" / "Dockerfile")
        for name in ("healthcheck.py", "launch.py", "cache_archive.py"):
            _link_or_copy(HERE / "sglang" / name, ctx / "images" / "sglang" / name)
        for name in ("apply.py", "patchset.py"):
            _link_or_copy(HERE / "patches" / name, ctx / "images" / "patches" / name)
        for src in sorted((REPO / "sglangflags").rglob("*")):
            if src.is_file() and "__pycache__" not in src.parts and src.suffix != ".pyc":
                _link_or_copy(src, ctx / "sglangflags" / src.relative_to(REPO / "sglangflags"))
        for src in sorted((REPO / "testengine").rglob("*")):
            if src.is_file() and "__pycache__" not in src.parts and src.suffix != ".pyc":
                _link_or_copy(src, ctx / "testengine" / src.relative_to(REPO / "testengine"))
        validate_args: dict[str, str] = {}
        _stage_validate(ctx, validate_args)
        for wheel in ensure_gate_wheels():
            _link_or_copy(wheel, ctx / "images" / "test-engine" / "wheels" / wheel.name)
        for key in keys:
            rel = TEST_ENGINE_RELEASES[key]
            tag = f"{args.repo}:{rel.tag}"
            build_args = {
                "BASE_IMAGE": args.base,
                "RELEASE": rel.tag,
                "SGLANG_VERSION": rel.sglang,
                "FLASHINFER_VERSION": rel.flashinfer,
                "CUDA_VERSION": rel.cuda,
                "PATCHES": rel.patches,
                **validate_args,
            }
            docker_build(ctx, "images/test-engine/Dockerfile", tag, build_args, force=args.force)
            _maybe_archive(args, tag)
            tags.append(tag)
    return tags


def _archive_is_current(tag: str, out_dir: Path, compress: bool) -> bool:
    """True when out_dir already holds an archive of exactly this image (same image id in its
    NAME.json, archive and checksum present): re-saving it would rewrite the same bytes."""
    base = archive.archive_name(tag)
    manifest = out_dir / f"{base}.json"
    tar = out_dir / (f"{base}.tar.gz" if compress else f"{base}.tar")
    if not (manifest.is_file() and tar.is_file() and Path(f"{tar}.sha256").is_file()):
        return False
    try:
        saved = json.loads(manifest.read_text()).get("image_id")
        current = archive.inspect_image(tag).get("Id")
    except (OSError, ValueError, archive.ArchiveError):
        return False
    return bool(saved) and saved == current


def _maybe_archive(args: argparse.Namespace, tag: str) -> None:
    if getattr(args, "archive_dir", None):
        if _archive_is_current(tag, Path(args.archive_dir), args.gzip):
            log(f"{tag}: offline archive in {args.archive_dir} is current (same image id), not re-saved")
            return
        log(f"{tag}: writing offline archive into {args.archive_dir} (docker save; large images take minutes)")
        m = archive.save(tag, Path(args.archive_dir), compress=args.gzip)
        log(f"{tag}: {m.archive} sha256 {m.sha256}")


def bake_seed(image: str, archive_path: Path, tag: str) -> str:
    """A layer on ``image`` with the archive of a warm FlashInfer cache (what the first host of a
    cache key whose gate passed left on the controller: reports/cache-archives/KEY.tar.gz + .sha256).

    Why: FlashInfer publishes no prebuilt kernels for every pinned version (flashinfer-cubin /
    -jit-cache), and a cold start compiles for tens of minutes. The warm-up runs once on a GPU host
    (a one-host rollout, whose gate pass archives the volume); this bakes its archive into the
    image, so an air-gapped fleet, or a host whose controller has no archive, seeds its cold volume
    from the image (checked there like any seed: checksum, key, every file's sha256). The archive
    is checked here first: a damaged one never reaches an image. The key is checked against the
    image's FlashInfer and CUDA labels, since an archive of another build's kernels would only be
    refused on every host."""
    sha_file = Path(f"{archive_path}.sha256")
    if not archive_path.is_file():
        raise BuildError(
            f"--archive {archive_path}: no such file (reports/cache-archives/<key>.tar.gz on the controller)"
        )
    if not sha_file.is_file():
        raise BuildError(f"{sha_file}: missing; an archive without its checksum (half-written?) is never baked")
    want = (sha_file.read_text().split() or [""])[0]
    got = archive.sha256_file(archive_path)
    if got != want:
        raise BuildError(f"{archive_path}: sha256 {got} does not match {sha_file} ({want}): damaged, not baked")
    fi, cu = (
        _image_label(image, "io.sglang-deploy.flashinfer.version"),
        _image_label(image, "io.sglang-deploy.cuda.version"),
    )
    if fi is None:
        raise BuildError(f"{image}: no such image (build or load it first)")
    prefix = re.sub(r"[^a-zA-Z0-9_.-]", "_", f"fi{fi}-cu{cu}-")  # as roles/flashinfer_cache/tasks/spec.yml
    if not archive_path.name.startswith(prefix):
        raise BuildError(
            f"{archive_path.name} is a cache of another build: {image} has FlashInfer {fi!r} and CUDA {cu!r}, "
            f"so its cache keys start {prefix!r}"
        )
    with tempfile.TemporaryDirectory(prefix="fiseed-") as tmp:
        ctx = Path(tmp)
        _link_or_copy(archive_path, ctx / archive_path.name)
        _link_or_copy(sha_file, ctx / sha_file.name)
        (ctx / "Dockerfile").write_text(
            f"FROM {image}\n"
            f"COPY {archive_path.name} {sha_file.name} {SEED_DIR}/\n"
            f'LABEL {SEED_LABEL}="{archive_path.name}" {SEED_LABEL}.sha256="{want}"\n'
        )
        log(f"{tag}: {image} with the cache seed {archive_path.name} ({archive_path.stat().st_size} bytes)")
        env = {**os.environ, "DOCKER_BUILDKIT": os.environ.get("DOCKER_BUILDKIT", "0")}
        proc = subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], env=env, check=False, stdout=sys.stderr)
        if proc.returncode != 0:
            raise BuildError(f"{tag}: docker build failed (exit {proc.returncode}); its output is above")
    return tag


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="build.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def archive_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--archive-dir", help="also write an offline archive (docker save + .sha256 + .json) here")
        sp.add_argument("--gzip", action="store_true", help="gzip the archive")
        sp.add_argument("--force", action="store_true", help="rebuild even when the source hash matches")
        sp.add_argument("--no-cache", action="store_true", help="docker build --no-cache (a cold build)")

    for name, mode, base, sv, fv, cv, tag in (
        ("sglang", "gpu", GPU_BASE, "0.5.23", "0.7.2", "13.0", "sglang-glm5:0.5.23-cu130"),
        ("sglang-cpu-test", "cpu-test", CPU_BASE, "0.5.9", "0.6.3", "12.9", "local/sglang-glm5:cpu-test"),
    ):
        sp = sub.add_parser(name, help=f"images/sglang/Dockerfile, INSTALL_MODE={mode}")
        sp.add_argument("--base", default=base, help=f"BASE_IMAGE (default {base})")
        sp.add_argument("--install-mode", default=mode, choices=["gpu", "cpu-test"])
        sp.add_argument("--sglang-version", default=sv)
        sp.add_argument("--flashinfer-version", default=fv)
        sp.add_argument("--cuda-version", default=cv, help="recorded in labels and the patch record")
        sp.add_argument("--tag", default=tag)
        sp.add_argument("--patches", help="expected id=status list (default: decided on the sglang wheel)")
        sp.add_argument("--pip-extra-index-url", help="e.g. https://download.pytorch.org/whl/cu130 for torch")
        if mode == "gpu":
            sp.add_argument("--local-cuda-base", action="store_true",
                            help=f"build FROM {LOCAL_CUDA_BASE} (images/cuda-base, made when missing) instead of "
                                 "--base: no registry needed; implies --wheelhouse")  # fmt: skip
            sp.add_argument("--wheelhouse", action="store_true",
                            help="install the lock's wheels downloaded on this host (.cache/wheelhouse), served "
                                 "to the build on 127.0.0.1 (--network host), not the index in the build")  # fmt: skip
            sp.add_argument("--wheelhouse-port", type=int, default=wheelhouse.PORT)
            sp.add_argument("--python-root", type=Path, help="CPython 3.12 prefix for the local CUDA base")
            sp.add_argument(
                "--with-cubins",
                action="store_true",
                help="bake FlashInfer's prebuilt kernels (trtllm-gen, DeepGEMM...) into the image: "
                "air-gapped B200 hosts need them; the build host must reach the artifact repository",
            )
            sp.add_argument("--cubins-repository", help="a mirror of FlashInfer's artifact repository")  # fmt: skip
        archive_opts(sp)

    lk = sub.add_parser("lock", help="re-resolve images/sglang/requirements.lock (uv; CPython 3.12, manylinux_2_34)")
    lk.add_argument("--sglang-version", default="0.5.23")
    lk.add_argument("--flashinfer-version", default="0.7.2")
    cb = sub.add_parser("cuda-base", help=f"the local CUDA 13.0 devel base ({LOCAL_CUDA_BASE}; no registry)")
    cb.add_argument("--python-root", type=Path, help="CPython 3.12 prefix (default: the build host's pyenv 3.12)")
    cb.add_argument("--tag", default=LOCAL_CUDA_BASE)
    cb.add_argument("--force", action="store_true")
    cb.add_argument("--no-cache", action="store_true", help="docker build --no-cache (a cold build)")

    te = sub.add_parser("test-engine", help="images/test-engine/Dockerfile (the TEST ENGINE, not SGLang)")
    te.add_argument("--release", default="all", choices=[*sorted(TEST_ENGINE_RELEASES), "all"])
    te.add_argument("--base", default=CPU_BASE)
    te.add_argument("--repo", default=TEST_ENGINE_REPO)
    archive_opts(te)

    sv = sub.add_parser("save", help="offline archive of an existing image")
    sv.add_argument("image")
    sv.add_argument("--out", required=True)
    sv.add_argument("--gzip", action="store_true")
    sd = sub.add_parser("seed", help="IMAGE plus the archive of a warm FlashInfer cache (one cold start per build)")
    sd.add_argument("image")
    sd.add_argument("--archive", type=Path, required=True, help="reports/cache-archives/<key>.tar.gz (+ .sha256)")
    sd.add_argument("--tag", required=True, help="the new image's tag")
    for name in ("verify", "load"):
        sp = sub.add_parser(name, help=f"{name} an archive against its .sha256 (and .json)")
        sp.add_argument("archive", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd in ("sglang", "sglang-cpu-test"):
            build_sglang(args)
        elif args.cmd == "lock":
            wheelhouse.compile_lock(args.sglang_version, args.flashinfer_version)
            print(wheelhouse.LOCK)
        elif args.cmd == "cuda-base":
            print(ensure_cuda_base(args.python_root, force=args.force, tag=args.tag, no_cache=args.no_cache))
        elif args.cmd == "test-engine":
            build_test_engine(args)
        elif args.cmd == "seed":
            print(bake_seed(args.image, args.archive, args.tag))
        elif args.cmd == "save":
            m = archive.save(args.image, Path(args.out), compress=args.gzip)
            print(Path(args.out) / m.archive)
        else:
            m = archive.verify(args.archive) if args.cmd == "verify" else archive.load(args.archive)
            what = f" ({', '.join(m.repo_tags)} {m.image_id[:19]})" if m else ""
            print(f"{args.archive}: OK{what}" + (", loaded" if args.cmd == "load" else ""))
    except (BuildError, PatchError, archive.ArchiveError, wheelhouse.LockError, cuda_base.BaseError) as exc:
        print(f"[images] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
