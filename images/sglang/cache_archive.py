"""Archive a warm FlashInfer/JIT cache volume once, seed it into other hosts' volumes: one cold start per fleet.

Why: a cold start JIT-compiles FlashInfer's (and Triton's, SGLang's, DeepGEMM's) kernels for
minutes to tens of minutes; every host of a GPU profile with the same image would compile the same
modules. After the canary's gate passed, its cache volume is archived with a manifest (the cache
key it was built for, every file with its size, sha256 and exact mtime) and a checksum; a later host whose
volume for that key is cold gets it extracted before its server starts. A damaged archive, one
built for another key, or one with a path that leaves the volume is refused before anything is
written. Stdlib only: it runs in a helper container from the serving image (the roles) or next to
the cache folders (benchmarks/gpu on the lent H200).

    python3 cache_archive.py create --src /cache --key KEY --out /out/KEY.tar.gz      # + KEY.tar.gz.sha256
    python3 cache_archive.py seed --archive /in/KEY.tar.gz --key KEY --dest /cache
    python3 cache_archive.py record --dest /cache --key KEY --build ID --about TEXT    # write the manifest
    python3 cache_archive.py manifest --dest /cache --key KEY                          # is it warm for KEY?

What a volume holds is more than its key (FlashInfer, CUDA, GPU arch): the SGLang release and the
server's kernel settings (attention/MoE backends, KV dtype, MTP, TP) decide which modules a start
compiles. ``record --build`` adds the start's build (an id and a readable description) to the
manifest's ``builds``; ``manifest`` returns them, and the roles count a start warm only when its
build is among them (roles/sglang_server: a new SGLang release under the same FlashInfer is a cold
start, with the cold deadline).

The roles stream archives through a helper container of the serving image: ``create --out -``
writes the tar.gz to stdout (the host computes its checksum over what it received), ``seed
--archive - --sha256 HEX`` reads it from stdin and checks it against that checksum before
anything lands in the volume.

Exit 0 on success, 2 with one line naming the problem on a refusal.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST = "sglang-deploy-cache-manifest.json"
SCHEMA = "sglang-deploy-cache/1"


class Refused(Exception):
    """An archive or a destination this tool will not touch; the message says why."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_manifest(src: Path, key: str) -> dict[str, Any]:
    files = []
    for path in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink() and p.name != MANIFEST):
        rel = path.relative_to(src).as_posix()
        st = path.stat()
        files.append({"path": rel, "size": st.st_size, "sha256": _sha256(path), "mtime_ns": st.st_mtime_ns})
    modules = [f["path"] for f in files if f["path"].endswith(".so")]
    return {"schema": SCHEMA, "key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": files, "modules": modules, "bytes": sum(f["size"] for f in files)}  # fmt: skip


def _manifest_of(src: Path, key: str) -> dict[str, Any]:
    if not src.is_dir():
        raise Refused(f"--src {src} is not a folder")
    manifest = build_manifest(src, key)
    if not manifest["modules"]:
        raise Refused(f"--src {src} holds no compiled module (*.so): nothing worth archiving (a cold cache?)")
    manifest["builds"] = _builds_of(src, key)  # an archive carries what its volume was warm for
    return manifest


def _write_tar(tar: tarfile.TarFile, src: Path, manifest: dict[str, Any]) -> None:
    data = json.dumps(manifest, indent=1).encode()
    info = tarfile.TarInfo(MANIFEST)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    tar.addfile(info, fileobj=io.BytesIO(data))
    for f in manifest["files"]:
        tar.add(src / f["path"], arcname=f["path"], recursive=False)


def _builds_of(dest: Path, key: str) -> dict[str, str]:
    """The builds the manifest in ``dest`` lists, if it is one of ``key`` (none otherwise)."""
    try:
        manifest = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    builds = manifest.get("builds") if manifest.get("key") == key else None
    return dict(builds) if isinstance(builds, dict) else {}


def record(dest: Path, key: str, build: str = "", about: str = "") -> dict[str, Any]:
    """Write the manifest of what ``dest`` holds now into it: after a gate passed on a cold start,
    this is what makes the next start "warm" (every module listed is there), not "some .so exists".
    The builds an earlier manifest of the key listed stay (their modules are still there), and
    ``build`` joins them."""
    manifest = _manifest_of(dest, key)
    builds = manifest["builds"]
    if build:
        builds[build] = about or build
    manifest["builds"] = dict(sorted(builds.items()))
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return {"recorded": str(dest), "key": key, "files": len(manifest["files"]), "modules": len(manifest["modules"]),
            "builds": sorted(builds)}  # fmt: skip


def create_stream(src: Path, key: str, stream: Any) -> dict[str, Any]:
    """The archive of ``src`` as a tar.gz stream (``--out -``): the receiver checksums what it got."""
    manifest = _manifest_of(src, key)
    # gzip by hand: tarfile's stream mode takes no compresslevel before Python 3.12 (Debian 12: 3.11)
    with gzip.GzipFile(fileobj=stream, mode="wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        _write_tar(tar, src, manifest)
    return {"files": len(manifest["files"]), "modules": len(manifest["modules"]), "bytes": manifest["bytes"]}


def create(src: Path, key: str, out: Path) -> dict[str, Any]:
    """``out`` (tar.gz of ``src`` plus its manifest) and ``out``.sha256; refuses a cache with no module."""
    manifest = _manifest_of(src, key)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
        _write_tar(tar, src, manifest)
    digest = _sha256(tmp)
    os.replace(tmp, out)
    Path(f"{out}.sha256").write_text(f"{digest}  {out.name}\n")
    return {
        "archive": str(out),
        "sha256": digest,
        "files": len(manifest["files"]),
        "modules": len(manifest["modules"]),
        "bytes": manifest["bytes"],
        "archive_bytes": out.stat().st_size,
    }


def _safe_member(member: tarfile.TarInfo) -> bool:
    p = PurePosixPath(member.name)
    return (member.isfile() or member.isdir()) and not p.is_absolute() and ".." not in p.parts


def seed_stream(stream: Any, sha256: str, key: str, dest: Path) -> dict[str, Any]:
    """``seed`` from a stream (``--archive -``): spooled outside the volume, then checked like a file."""
    if len(sha256) != 64:
        raise Refused("--sha256 must be the archive's 64-digit sha256 when it comes on stdin")
    with tempfile.TemporaryDirectory(prefix="cache-seed-") as tmp:
        spool = Path(tmp) / "archive.tar.gz"
        with spool.open("wb") as fh:
            for block in iter(lambda: stream.read(1 << 20), b""):
                fh.write(block)
        return seed(spool, key, dest, sha256=sha256)


def seed(
    archive: Path, key: str, dest: Path, checksum: Path | None = None, sha256: str | None = None
) -> dict[str, Any]:
    """Check the archive (checksum, manifest key, member paths, every file's sha256), then extract."""
    checksum = checksum or Path(f"{archive}.sha256")
    if not archive.is_file():
        raise Refused(f"--archive {archive}: no such file")
    if sha256 is None:
        if not checksum.is_file():
            raise Refused(f"{checksum}: no checksum next to the archive; an archive without one is never seeded")
        sha256 = checksum.read_text().split()[0] if checksum.read_text().split() else ""
        source = str(checksum)
    else:
        source = "--sha256"
    got = _sha256(archive)
    if got != sha256:
        raise Refused(f"{archive}: sha256 {got} does not match {source} ({sha256}): damaged, not seeded")
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        bad = [m.name for m in members if not _safe_member(m)]
        if bad:
            raise Refused(f"{archive}: members outside the cache or not plain files ({bad[:3]}): not seeded")
        try:
            manifest = json.load(tar.extractfile(MANIFEST))  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            raise Refused(f"{archive}: no {MANIFEST}: not an archive of this tool") from None
        if manifest.get("schema") != SCHEMA or manifest.get("key") != key:
            raise Refused(
                f"{archive} was built for cache key {manifest.get('key')!r}, this volume is {key!r}: not seeded"
            )
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest, prefix=".seed-") as tmp:
            stage = Path(tmp)
            chosen = [m for m in members if m.name != MANIFEST]  # every member was checked above
            try:
                tar.extractall(stage, members=chosen, filter="data")
            except TypeError:  # Python < 3.11.4 (Debian 12's 3.11.2) has no extraction filters
                tar.extractall(stage, members=chosen)
            for f in manifest["files"]:
                path = stage / f["path"]
                if not path.is_file() or path.stat().st_size != f["size"] or _sha256(path) != f["sha256"]:
                    raise Refused(f"{archive}: {f['path']} does not match its manifest entry: not seeded")
            for f in manifest["files"]:
                # The exact modification time, to the nanosecond: tar carries it as a float, which
                # lands up to ~0.2 us off, and ninja (FlashInfer's JIT builds) then finds an output
                # newer than the time its deps log recorded, calls the deps stale and rebuilds that
                # module: about half of them, at random (issue 23, docs/flashinfer-cache.md).
                if isinstance(f.get("mtime_ns"), int):
                    os.utime(stage / f["path"], ns=(f["mtime_ns"], f["mtime_ns"]))
            for f in manifest["files"]:  # only now does anything land in the volume
                target = dest / f["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / f["path"], target)
    (dest / MANIFEST).write_text(json.dumps({**manifest, "seeded_from": archive.name}, indent=1))
    return {"seeded": str(dest), "files": len(manifest["files"]), "modules": len(manifest["modules"]),
            "bytes": manifest["bytes"], "key": key}  # fmt: skip


def warm(dest: Path, key: str) -> dict[str, Any]:
    """Warm for ``key``: a manifest of that key whose every listed module is present with its size."""
    path = dest / MANIFEST
    if not path.is_file():
        return {"warm": False, "why": "no manifest (never archived from, nor seeded)"}
    manifest = json.loads(path.read_text())
    if manifest.get("key") != key:
        return {"warm": False, "why": f"manifest of key {manifest.get('key')!r}, not {key!r}"}
    sizes = {f["path"]: f["size"] for f in manifest.get("files", [])}
    missing = [
        m for m in manifest.get("modules", []) if not (dest / m).is_file() or (dest / m).stat().st_size != sizes[m]
    ]
    if missing or not manifest.get("modules"):
        return {
            "warm": False,
            "why": f"{len(missing)} of {len(manifest.get('modules', []))} modules missing or changed",
        }
    builds = manifest.get("builds")
    return {"warm": True, "modules": len(manifest["modules"]), "builds": builds if isinstance(builds, dict) else {}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create")
    c.add_argument("--src", type=Path, required=True)
    c.add_argument("--key", required=True)
    c.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("seed")
    s.add_argument("--archive", type=Path, required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--dest", type=Path, required=True)
    s.add_argument("--checksum", type=Path)
    s.add_argument("--sha256", help="the archive's sha256 (required with --archive -)")
    r = sub.add_parser("record")
    r.add_argument("--dest", type=Path, required=True)
    r.add_argument("--key", required=True)
    r.add_argument("--build", default="", help="the start's build id (SGLang release + kernel settings)")
    r.add_argument("--about", default="", help="the build in words (shown when another build finds the cache)")
    m = sub.add_parser("manifest")
    m.add_argument("--dest", type=Path, required=True)
    m.add_argument("--key", required=True)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "create" and str(args.out) == "-":
            out = create_stream(args.src, args.key, sys.stdout.buffer)
            print(json.dumps(out), file=sys.stderr)  # stdout is the archive
            return 0
        if args.cmd == "create":
            out = create(args.src, args.key, args.out)
        elif args.cmd == "seed" and str(args.archive) == "-":
            out = seed_stream(sys.stdin.buffer, args.sha256 or "", args.key, args.dest)
        elif args.cmd == "seed":
            out = seed(args.archive, args.key, args.dest, args.checksum, args.sha256)
        elif args.cmd == "record":
            out = record(args.dest, args.key, args.build, args.about)
        else:
            out = warm(args.dest, args.key)
    except Refused as exc:
        print(f"cache_archive: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
