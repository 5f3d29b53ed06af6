"""images/sglang/launch.py: the server gets its secrets from files, and they show nowhere else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from images_testlib import IMAGES

LAUNCH = IMAGES / "sglang" / "launch.py"
KEY = "sk-test-7f3a91c2d4e5b6a8"
TOKEN = "hf_testtoken_0123456789"

# A stand-in server module: says what it was started with, and logs the way SGLang 0.5.17 does.
FAKE_SERVER = """
import json, logging, os, sys
logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
logging.getLogger("sglang.srt.entrypoints.engine").info("server_args=ServerArgs(api_key=%r, port=1)", sys.argv[-1])
logging.getLogger("x").warning(f"token {os.environ.get('HF_TOKEN')} in an f-string")
cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
print(json.dumps({"argv": sys.argv[1:], "cmdline": cmdline, "hf_token": os.environ.get("HF_TOKEN"),
                  "name": __name__}))
"""


def launch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "fake_server.py").write_text(FAKE_SERVER)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, str(LAUNCH), *args], capture_output=True, text=True, env=env,
                          check=False, timeout=60)  # fmt: skip


@pytest.fixture
def secret_files(tmp_path: Path) -> tuple[Path, Path]:
    key, token = tmp_path / "api-key", tmp_path / "hf-token"
    key.write_text(KEY + "\n")
    token.write_text(TOKEN + "\n")
    return key, token


def test_the_key_reaches_argv_in_process_only_and_logs_are_redacted(tmp_path: Path, secret_files) -> None:
    key, token = secret_files
    proc = launch(tmp_path, "--api-key-file", str(key), "--hf-token-file", str(token), "--",
                  "python3", "-m", "fake_server", "--port", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["argv"] == ["--port", "1", "--api-key", KEY]  # what SGLang's parser reads
    assert seen["name"] == "__main__"
    assert KEY not in seen["cmdline"] and "launch.py" in seen["cmdline"]  # what ps shows
    assert seen["hf_token"] == TOKEN
    assert KEY not in proc.stderr and TOKEN not in proc.stderr
    assert "server_args=ServerArgs(api_key='***', port=1)" in proc.stderr
    assert "token *** in an f-string" in proc.stderr


def test_without_secrets_the_command_runs_unchanged(tmp_path: Path) -> None:
    proc = launch(tmp_path, "--", "python3", "-m", "fake_server", "--port", "1")
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["argv"] == ["--port", "1"] and seen["hf_token"] is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--api-key-file", "/nonexistent/key", "--", "python3", "-m", "fake_server"],
         "cannot read the API key file /nonexistent/key"),
        (["--", "python3", "-m", "fake_server", "--api-key", "x"], "--api-key on the command line would be visible"),
        (["--", "/bin/sglang-server", "--port", "1"], "must be 'python3 -m MODULE ...'"),
        (["python3", "-m", "fake_server"], "usage: launch.py"),
    ],
)  # fmt: skip
def test_refusals_name_the_problem(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = launch(tmp_path, *args)
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr


def test_an_empty_key_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    proc = launch(tmp_path, "--api-key-file", str(empty), "--", "python3", "-m", "fake_server")
    assert proc.returncode != 0 and f"the API key file {empty} is empty" in proc.stderr
