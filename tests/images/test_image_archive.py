"""Offline archives: save, checksum, manifest, verify, load; a corrupted archive must fail."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import image_archive
import pytest
from image_archive import ArchiveError
from images_testlib import IMAGES

TINY = "local/images-test-tiny:archive"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(IMAGES / "build.py"), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def fake_archive(tmp_path: Path) -> Path:
    """An archive written the way save() writes one, without docker (checks verify() alone)."""
    tar = tmp_path / "img.tar"
    tar.write_bytes(b"layer-bytes" * 1000)
    digest = image_archive.sha256_file(tar)
    (tmp_path / "img.tar.sha256").write_text(f"{digest}  img.tar\n")
    (tmp_path / "img.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "archive": "img.tar",
                "sha256": digest,
                "compressed": False,
                "image_id": "sha256:" + "0" * 64,
                "repo_tags": ["x:y"],
                "labels": {},
            }
        )
    )
    return tar


def test_verify_accepts_intact_and_rejects_flipped_byte(tmp_path: Path):
    tar = fake_archive(tmp_path)
    assert image_archive.verify(tar).repo_tags == ["x:y"]
    data = bytearray(tar.read_bytes())
    data[100] ^= 0xFF
    tar.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match="does not match"):
        image_archive.verify(tar)


def test_verify_rejects_missing_checksum_and_truncation(tmp_path: Path):
    tar = fake_archive(tmp_path)
    tar.write_bytes(tar.read_bytes()[:-10])
    with pytest.raises(ArchiveError, match="corrupted or incomplete"):
        image_archive.verify(tar)
    (tmp_path / "img.tar.sha256").unlink()
    with pytest.raises(ArchiveError, match="checksum file missing"):
        image_archive.verify(tar)


@pytest.fixture
def tiny_image(docker_client):
    """A one-file image made with docker import: saving it takes milliseconds."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        payload = b"sglang-deploy archive test\n"
        info = tarfile.TarInfo("etc/archive-test.txt")
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    subprocess.run(
        ["docker", "import", "--change", "LABEL io.sglang-deploy.engine=test-engine", "-", TINY],
        input=buf.getvalue(),
        check=True,
        capture_output=True,
    )
    yield docker_client.images.get(TINY)
    subprocess.run(["docker", "image", "rm", "-f", TINY], check=False, capture_output=True)


@pytest.mark.docker
@pytest.mark.parametrize("gzip", [False, True], ids=["tar", "tar.gz"])
def test_save_verify_load_roundtrip(tiny_image, docker_client, tmp_path: Path, gzip: bool):
    proc = cli("save", TINY, "--out", tmp_path, *(["--gzip"] if gzip else []))
    assert proc.returncode == 0, proc.stderr
    archive = Path(proc.stdout.strip())
    assert archive.name.endswith(".tar.gz" if gzip else ".tar")
    sums = subprocess.run(
        ["sha256sum", "-c", archive.name + ".sha256"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert sums.returncode == 0, sums.stdout + sums.stderr
    manifest = json.loads(archive.with_name(archive.name.split(".tar")[0] + ".json").read_text())
    assert manifest["image_id"] == tiny_image.id and TINY in manifest["repo_tags"]
    assert manifest["labels"]["io.sglang-deploy.engine"] == "test-engine"
    assert not list(tmp_path.glob(".*partial")), "temporary files left behind"

    ok = cli("verify", archive)
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stderr
    docker_client.images.remove(TINY, force=True)
    loaded = cli("load", archive)
    assert loaded.returncode == 0, loaded.stderr
    assert docker_client.images.get(TINY).id == tiny_image.id


@pytest.mark.docker
def test_corrupted_archive_fails_verification_and_is_not_loaded(tiny_image, docker_client, tmp_path: Path):
    proc = cli("save", TINY, "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = Path(proc.stdout.strip())
    with archive.open("r+b") as fh:
        fh.seek(512)
        byte = fh.read(1)
        fh.seek(512)
        fh.write(bytes([byte[0] ^ 0xFF]))
    docker_client.images.remove(TINY, force=True)
    bad = cli("load", archive)
    assert bad.returncode == 1
    assert "does not match" in bad.stderr and archive.name in bad.stderr
    with pytest.raises(Exception, match=r"No such image|not found"):
        docker_client.images.get(TINY)
