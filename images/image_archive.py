"""Offline image archives: ``docker save`` + sha256 + a small JSON manifest, and the way back.

For fleets that cannot reach a registry. An archive is three files side by side:

    NAME.tar[.gz]          docker save output (optionally gzip-compressed)
    NAME.tar[.gz].sha256   sha256sum format ("<hex>  NAME.tar.gz"), so `sha256sum -c` works
    NAME.json              image id, repo tags, labels, archive file name and sha256

The roles copy all three, check the sha256 and load it (community.docker.docker_image_load);
``verify`` and ``load`` here are the same steps for documentation and tests.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

CHUNK = 1 << 20
MANIFEST_SCHEMA_VERSION = 1


class ArchiveError(Exception):
    """A missing, corrupted or mismatching archive (the message says which file and why)."""


@dataclass
class ArchiveManifest:
    """What NAME.json holds; enough to check a loaded image is the one that was saved."""

    schema_version: int
    archive: str
    sha256: str
    compressed: bool
    image_id: str
    repo_tags: list[str]
    labels: dict[str, str]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _docker(*args: str, capture: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=capture, text=True, check=False)
    if proc.returncode != 0:
        raise ArchiveError(f"docker {' '.join(args)} failed: {(proc.stderr or '').strip()}")
    return proc.stdout if capture else ""


def inspect_image(ref: str) -> dict:
    return json.loads(_docker("image", "inspect", ref))[0]


def archive_name(image: str) -> str:
    """``local/sglang-test-engine:release-a`` -> ``local_sglang-test-engine_release-a``."""
    return "".join(c if c.isalnum() or c in "-." else "_" for c in image)


def save(image: str, out_dir: Path, *, compress: bool = False, name: str | None = None) -> ArchiveManifest:
    """Write NAME.tar[.gz], its .sha256 and NAME.json for ``image`` into ``out_dir``.

    Files are written under temporary names and renamed at the end, so an interrupted
    save never leaves an archive that looks complete.
    """
    info = inspect_image(image)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = name or archive_name(image)
    tar_name = f"{base}.tar.gz" if compress else f"{base}.tar"
    final = out_dir / tar_name
    raw = out_dir / f".{base}.tar.partial"
    _docker("save", "-o", str(raw), image)
    if compress:
        packed = out_dir / f".{tar_name}.partial"
        with raw.open("rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, CHUNK)
        raw.unlink()
        raw = packed
    digest = sha256_file(raw)
    raw.replace(final)
    (out_dir / f"{tar_name}.sha256").write_text(f"{digest}  {tar_name}\n")
    manifest = ArchiveManifest(
        schema_version=MANIFEST_SCHEMA_VERSION,
        archive=tar_name,
        sha256=digest,
        compressed=compress,
        image_id=info["Id"],
        repo_tags=list(info.get("RepoTags") or []),
        labels=dict((info.get("Config") or {}).get("Labels") or {}),
    )
    (out_dir / f"{base}.json").write_text(json.dumps(asdict(manifest), indent=2, sort_keys=True) + "\n")
    return manifest


def verify(archive: Path) -> ArchiveManifest | None:
    """Check ``archive`` against its .sha256 file (and NAME.json when present).

    Returns the manifest if there is one. Raises ArchiveError naming the file on mismatch.
    """
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such archive")
    sum_file = archive.with_name(archive.name + ".sha256")
    if not sum_file.is_file():
        raise ArchiveError(f"{sum_file}: checksum file missing (expected beside the archive)")
    fields = sum_file.read_text().split()
    if len(fields) != 2 or fields[1].lstrip("*") != archive.name or len(fields[0]) != 64:
        raise ArchiveError(f"{sum_file}: expected one line '<sha256>  {archive.name}'")
    actual = sha256_file(archive)
    if actual != fields[0]:
        raise ArchiveError(
            f"{archive}: sha256 {actual} does not match {fields[0]} in {sum_file.name}: "
            "the archive is corrupted or incomplete; copy it again"
        )
    base = archive.name.removesuffix(".gz").removesuffix(".tar")
    man_file = archive.with_name(f"{base}.json")
    if not man_file.is_file():
        return None
    manifest = ArchiveManifest(**json.loads(man_file.read_text()))
    if manifest.sha256 != actual or manifest.archive != archive.name:
        raise ArchiveError(
            f"{man_file}: describes {manifest.archive} with sha256 {manifest.sha256}, not {archive.name} with {actual}"
        )
    return manifest


def load(archive: Path) -> ArchiveManifest | None:
    """Verify, then ``docker load`` (gzip is handled by docker), then check the image id."""
    manifest = verify(archive)
    _docker("load", "-q", "-i", str(archive))
    if manifest:
        for tag in manifest.repo_tags:
            got = inspect_image(tag)["Id"]
            if got != manifest.image_id:
                raise ArchiveError(f"after loading {archive.name}: {tag} is {got}, expected {manifest.image_id}")
    return manifest
