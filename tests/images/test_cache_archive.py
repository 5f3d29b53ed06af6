"""images/sglang/cache_archive.py: one cold start per fleet, and nothing damaged or foreign is ever seeded."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from images_testlib import IMAGES

_spec = importlib.util.spec_from_file_location("cache_archive", IMAGES / "sglang" / "cache_archive.py")
ca = importlib.util.module_from_spec(_spec)
sys.modules["cache_archive"] = ca
_spec.loader.exec_module(ca)

KEY = "fi0.7.2-cu13.0-sm120-al12.0a"


@pytest.fixture
def warm_cache(tmp_path: Path) -> Path:
    src = tmp_path / "volume-a"
    (src / "0.7.2/120a/cached_ops/silu_and_mul").mkdir(parents=True)
    (src / "0.7.2/120a/cached_ops/silu_and_mul/silu_and_mul.so").write_bytes(b"\x7fELF" + b"k" * 5000)
    (src / "triton/abc").mkdir(parents=True)
    (src / "triton/abc/kernel.cubin").write_bytes(b"cubin" * 100)
    return src


def test_a_seeded_volume_holds_exactly_what_the_warm_one_held(tmp_path: Path, warm_cache: Path) -> None:
    made = ca.create(warm_cache, KEY, tmp_path / "out" / f"{KEY}.tar.gz")
    assert made["files"] == 2 and made["modules"] == 1
    assert (tmp_path / "out" / f"{KEY}.tar.gz.sha256").read_text().split()[0] == made["sha256"]
    dest = tmp_path / "volume-b"
    got = ca.seed(Path(made["archive"]), KEY, dest)
    assert got["files"] == 2
    for rel in ("0.7.2/120a/cached_ops/silu_and_mul/silu_and_mul.so", "triton/abc/kernel.cubin"):
        assert (dest / rel).read_bytes() == (warm_cache / rel).read_bytes()
    assert ca.warm(dest, KEY) == {"warm": True, "modules": 1, "builds": {}}
    assert not [p for p in dest.iterdir() if p.name.startswith(".seed-")]  # the staging folder is gone


def test_warm_means_the_keys_modules_are_there(tmp_path: Path, warm_cache: Path) -> None:
    made = ca.create(warm_cache, KEY, tmp_path / "a.tar.gz")
    dest = tmp_path / "v"
    ca.seed(Path(made["archive"]), KEY, dest)
    assert ca.warm(dest, "fi0.7.2-cu13.0-sm100-al10.0a")["warm"] is False
    (dest / "0.7.2/120a/cached_ops/silu_and_mul/silu_and_mul.so").unlink()
    assert ca.warm(dest, KEY) == {"warm": False, "why": "1 of 1 modules missing or changed"}
    assert ca.warm(tmp_path / "empty", KEY)["warm"] is False


def test_a_cold_cache_is_not_archived(tmp_path: Path) -> None:
    (tmp_path / "cold" / "logs").mkdir(parents=True)
    (tmp_path / "cold" / "logs" / "build.log").write_text("x")
    with pytest.raises(ca.Refused, match="holds no compiled module"):
        ca.create(tmp_path / "cold", KEY, tmp_path / "x.tar.gz")


def test_a_damaged_archive_is_refused_and_nothing_is_written(tmp_path: Path, warm_cache: Path) -> None:
    made = ca.create(warm_cache, KEY, tmp_path / "a.tar.gz")
    archive = Path(made["archive"])
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    with pytest.raises(ca.Refused, match=r"does not match .*damaged, not seeded"):
        ca.seed(archive, KEY, tmp_path / "v")
    assert not (tmp_path / "v").exists()


def test_an_archive_of_another_key_is_refused(tmp_path: Path, warm_cache: Path) -> None:
    made = ca.create(warm_cache, "fi0.7.2-cu13.0-sm100-al10.0a", tmp_path / "a.tar.gz")
    with pytest.raises(ca.Refused, match=r"built for cache key 'fi0\.7\.2-cu13\.0-sm100-al10\.0a', this volume is"):
        ca.seed(Path(made["archive"]), KEY, tmp_path / "v")
    assert not (tmp_path / "v").exists()


def test_an_archive_without_its_checksum_is_refused(tmp_path: Path, warm_cache: Path) -> None:
    made = ca.create(warm_cache, KEY, tmp_path / "a.tar.gz")
    Path(made["archive"] + ".sha256").unlink()
    with pytest.raises(ca.Refused, match="no checksum next to the archive"):
        ca.seed(Path(made["archive"]), KEY, tmp_path / "v")


def test_a_path_that_leaves_the_volume_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        manifest = json.dumps({"schema": ca.SCHEMA, "key": KEY, "files": [], "modules": []}).encode()
        info = tarfile.TarInfo(ca.MANIFEST)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        evil = tarfile.TarInfo("../../etc/cron.d/x")
        evil.size = 1
        tar.addfile(evil, io.BytesIO(b"x"))
    (tmp_path / "evil.tar.gz.sha256").write_text(f"{ca._sha256(archive)}  evil.tar.gz\n")
    with pytest.raises(ca.Refused, match="members outside the cache"):
        ca.seed(archive, KEY, tmp_path / "v")


def test_the_cli_exits_2_with_the_reason(tmp_path: Path) -> None:
    assert ca.main(["seed", "--archive", str(tmp_path / "none.tar.gz"), "--key", KEY, "--dest", str(tmp_path)]) == 2


# the images run it with Debian 12's python3 (3.11: no compresslevel in tarfile's stream mode)
PYTHONS = [sys.executable] + [p for p in ("/usr/bin/python3",) if Path(p).is_file()]


def _cli(*args: str, stdin: bytes = b"", python: str = sys.executable) -> tuple[int, bytes, str]:
    import subprocess

    proc = subprocess.run(
        [python, str(IMAGES / "sglang" / "cache_archive.py"), *args], input=stdin, capture_output=True
    )
    return proc.returncode, proc.stdout, proc.stderr.decode()


@pytest.mark.parametrize("python", PYTHONS)
def test_streamed_archive_seeds_only_with_the_checksum_of_what_was_received(
    tmp_path: Path, warm_cache: Path, python: str
) -> None:
    """The roles' path: create --out - on one host, the host checksums the bytes, seed --archive - elsewhere."""
    import hashlib

    rc, data, err = _cli("create", "--src", str(warm_cache), "--key", KEY, "--out", "-", python=python)
    assert rc == 0, err
    assert rc == 0 and json.loads(err)["modules"] == 1
    digest = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "volume-b"
    rc, out, err = _cli(
        "seed", "--archive", "-", "--sha256", "0" * 64, "--key", KEY, "--dest", str(dest), stdin=data, python=python
    )
    assert rc == 2 and f"does not match --sha256 ({'0' * 64}): damaged, not seeded" in err
    assert not dest.exists() or not any(dest.rglob("*.so"))
    rc, out, err = _cli(
        "seed", "--archive", "-", "--sha256", digest, "--key", KEY, "--dest", str(dest), stdin=data, python=python
    )
    assert rc == 0, err
    assert json.loads(out)["modules"] == 1
    rel = "0.7.2/120a/cached_ops/silu_and_mul/silu_and_mul.so"
    assert (dest / rel).read_bytes() == (warm_cache / rel).read_bytes()
    assert json.loads(_cli("manifest", "--dest", str(dest), "--key", KEY)[1]) == {
        "warm": True,
        "modules": 1,
        "builds": {},
    }
    rc, _, err = _cli("seed", "--archive", "-", "--key", KEY, "--dest", str(dest), stdin=data)
    assert rc == 2 and "--sha256 must be the archive's 64-digit sha256" in err


def test_record_makes_a_cold_started_volume_warm_for_its_key_only(tmp_path: Path, warm_cache: Path) -> None:
    """After a gate passed on a cold start the manifest is written; without it the volume is not warm,
    whatever *.so it holds."""
    assert ca.warm(warm_cache, KEY) == {"warm": False, "why": "no manifest (never archived from, nor seeded)"}
    rc, out, _ = _cli("record", "--dest", str(warm_cache), "--key", KEY)
    assert rc == 0 and json.loads(out) == {
        "recorded": str(warm_cache), "key": KEY, "files": 2, "modules": 1, "builds": []}  # fmt: skip
    assert ca.warm(warm_cache, KEY) == {"warm": True, "modules": 1, "builds": {}}
    assert ca.warm(warm_cache, "another-key")["warm"] is False
    # the manifest is not itself a listed file, so recording twice lists the same files
    assert ca.record(warm_cache, KEY)["files"] == 2
    (tmp_path / "cold").mkdir()
    rc, _, err = _cli("record", "--dest", str(tmp_path / "cold"), "--key", KEY)
    assert rc == 2 and "holds no compiled module" in err


def test_the_manifest_lists_every_build_recorded_on_the_key_and_seeds_carry_them(tmp_path, warm_cache) -> None:
    """What a volume holds beyond its key: each passing start's build (SGLang release + kernel settings)
    joins the manifest's builds, earlier ones stay (their modules are still there), another key's
    builds do not carry over, and an archive seeds them into the next host's volume."""
    a, b = "sglang0.5.22-3f1c0d9e2b7a", "sglang0.5.23-9a8b7c6d5e4f"
    rc, out, _ = _cli(
        "record", "--dest", str(warm_cache), "--key", KEY, "--build", a, "--about", "sglang 0.5.22, mtp off"
    )
    assert rc == 0 and json.loads(out)["builds"] == [a]
    assert ca.warm(warm_cache, KEY)["builds"] == {a: "sglang 0.5.22, mtp off"}
    ca.record(warm_cache, KEY, b, "sglang 0.5.23, mtp on")
    assert ca.warm(warm_cache, KEY)["builds"] == {a: "sglang 0.5.22, mtp off", b: "sglang 0.5.23, mtp on"}
    ca.record(warm_cache, KEY, b)  # recorded again: the same two, the newer words kept
    assert list(ca.warm(warm_cache, KEY)["builds"]) == [a, b]
    ca.record(warm_cache, "another-key", b)
    assert ca.warm(warm_cache, "another-key")["builds"] == {b: b}  # a was of KEY, not of this key
    ca.record(warm_cache, KEY, a)
    made = ca.create(warm_cache, KEY, tmp_path / "k.tar.gz")
    dest = tmp_path / "next-host"
    ca.seed(Path(made["archive"]), KEY, dest)
    assert ca.warm(dest, KEY)["builds"] == {a: a}


NINJA = shutil.which("ninja", path=str(Path(sys.executable).parent)) or shutil.which("ninja")


@pytest.mark.skipif(NINJA is None, reason="ninja is in requirements.txt (pip) and on Debian as ninja-build")
def test_a_seeded_ninja_build_needs_no_rebuild(tmp_path: Path) -> None:
    """FlashInfer JIT-builds its modules with ninja (deps = gcc): a module is rebuilt when its output
    is newer than the time ninja's deps log recorded for it, to the nanosecond. A tar's float mtime
    lands up to ~0.2 us off, so a plain extraction made about half the modules of a seeded volume
    rebuild (seen on the lent H100: a seeded start's first sampled request took 37.9 s, a warm one's
    0.1 s). The seed sets each file's exact mtime from the manifest, and real ninja has nothing to do."""
    warm = tmp_path / "warm"
    warm.mkdir()
    rules = [
        "rule cc",
        "  command = cp $in $out && printf '%s: %s\\n' $out $in > $out.d",
        "  depfile = $out.d",
        "  deps = gcc",
    ]
    for i in range(24):
        (warm / f"m{i}.cu").write_text(f"kernel {i}\n")
        rules.append(f"build m{i}.so: cc m{i}.cu")
    (warm / "build.ninja").write_text("\n".join(rules) + "\n")
    built = subprocess.run([NINJA, "-C", str(warm)], capture_output=True, text=True, check=True)
    assert "[24/24]" in built.stdout
    assert "no work to do" in subprocess.run([NINJA, "-C", str(warm)], capture_output=True, text=True).stdout
    archive = tmp_path / "out" / f"{KEY}.tar.gz"
    ca.create(warm, KEY, archive)
    seeded = tmp_path / "seeded"
    ca.seed(archive, KEY, seeded)
    for p in sorted(warm.iterdir()):
        assert (seeded / p.name).stat().st_mtime_ns == p.stat().st_mtime_ns, p.name
    dry = subprocess.run([NINJA, "-C", str(seeded), "-n", "-d", "explain"], capture_output=True, text=True)
    assert "no work to do" in dry.stdout, (dry.stdout + dry.stderr)[-2000:]


def test_build_seed_bakes_only_a_whole_archive_of_the_image_build(tmp_path, warm_cache, monkeypatch, capsys) -> None:
    """images/build.py seed: every refusal comes before docker builds anything (and names the fix)."""
    from images_testlib import image_build

    made = Path(ca.create(warm_cache, KEY, tmp_path / "out" / f"{KEY}.tar.gz")["archive"])
    labels = {"io.sglang-deploy.flashinfer.version": "0.7.2", "io.sglang-deploy.cuda.version": "13.0"}
    monkeypatch.setattr(image_build, "_image_label", lambda tag, label: labels.get(label) if tag == "img:1" else None)
    built: list[list[str]] = []

    def fake_run(cmd, **kw):  # docker build: the command and the staged context, not a real build
        ctx = Path(cmd[-1])
        built.append([*cmd[:-1], (ctx / "Dockerfile").read_text(), *sorted(p.name for p in ctx.iterdir())])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(image_build.subprocess, "run", fake_run)

    def refused(archive: Path, image: str = "img:1") -> str:
        assert image_build.main(["seed", image, "--archive", str(archive), "--tag", "img:1-seeded"]) == 1
        return capsys.readouterr().err

    assert "no such file" in refused(tmp_path / "none.tar.gz")
    assert "no such image (build or load it first)" in refused(made, image="img:2")
    other = tmp_path / "other" / "fi0.6.3-cu12.9-sm120-al12.0a.tar.gz"
    ca.create(warm_cache, "fi0.6.3-cu12.9-sm120-al12.0a", other)
    assert (
        "fi0.6.3-cu12.9-sm120-al12.0a.tar.gz is a cache of another build: img:1 has FlashInfer '0.7.2' and "
        "CUDA '13.0', so its cache keys start 'fi0.7.2-cu13.0-'"
    ) in refused(other)
    sha = Path(f"{made}.sha256")
    kept = sha.read_text()
    sha.unlink()
    assert "missing; an archive without its checksum (half-written?) is never baked" in refused(made)
    sha.write_text(kept)
    data = bytearray(made.read_bytes())
    data[len(data) // 2] ^= 0xFF
    made.write_bytes(bytes(data))
    assert f"does not match {sha}" in refused(made) and built == []
    data[len(data) // 2] ^= 0xFF
    made.write_bytes(bytes(data))

    assert image_build.main(["seed", "img:1", "--archive", str(made), "--tag", "img:1-seeded"]) == 0
    assert capsys.readouterr().out.strip() == "img:1-seeded"
    (cmd,) = built
    digest = kept.split()[0]
    assert cmd[:5] == ["docker", "build", "-q", "-t", "img:1-seeded"]
    assert cmd[5] == (
        "FROM img:1\n"
        f"COPY {KEY}.tar.gz {KEY}.tar.gz.sha256 /opt/sglang-deploy/flashinfer-seed/\n"
        f'LABEL io.sglang-deploy.flashinfer.seed="{KEY}.tar.gz" io.sglang-deploy.flashinfer.seed.sha256="{digest}"\n'
    )
    assert cmd[6:] == ["Dockerfile", f"{KEY}.tar.gz", f"{KEY}.tar.gz.sha256"]
