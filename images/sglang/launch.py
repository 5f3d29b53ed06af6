"""Start the server with its secrets from root-only files: never in argv, the environment docker shows, or logs.

Why: ``--api-key KEY`` on SGLang's command line is in ``ps`` on the host and in ``docker inspect``,
an environment variable is in ``docker inspect``, and SGLang logs its whole ServerArgs at start
(``server_args=ServerArgs(... api_key='...')``, 0.5.17's engine.py). So the role bind-mounts the
secrets read-only as files, and this launcher (the container's entrypoint, stdlib only):

- reads ``--api-key-file`` and ``--hf-token-file`` (HF_TOKEN for gated model downloads);
- runs the server's module (``python3 -m MODULE ARGS`` after ``--``) in this same process with
  ``--api-key KEY`` added to its ``sys.argv`` only: the kernel's command line of the process (what
  ``ps`` and /proc show) stays the one without the key, and SGLang's worker processes are spawned
  from pickled arguments, not from a command line;
- puts HF_TOKEN into this process's environment only (not the container's configuration);
- replaces either secret by ``***`` in every log record this process writes (a LogRecord factory,
  so it holds whatever handlers SGLang installs later).

    python3 /opt/sglang-deploy/launch.py --api-key-file /run/secrets/sglang-api-key -- \\
        python3 -m sglang.launch_server --model-path ... --port 30000
"""

from __future__ import annotations

import argparse
import logging
import os
import runpy
import sys

REDACTED = "***"


def _read_secret(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            value = fh.read().strip()
    except OSError as exc:
        raise SystemExit(f"launch.py: cannot read the {what} file {path}: {exc.strerror}") from None
    if not value:
        raise SystemExit(f"launch.py: the {what} file {path} is empty")
    return value


def redact_logs(secrets: list[str]) -> None:
    """Every log record of this process, whoever configures the handlers, with the secrets replaced."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return
    make_record = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's to report, not ours
            return record
        if any(s in message for s in secrets):
            for s in secrets:
                message = message.replace(s, REDACTED)
            record.msg, record.args = message, None
        return record

    logging.setLogRecordFactory(factory)


def module_of(command: list[str]) -> tuple[str, list[str]]:
    """``python3 -m MODULE ARGS`` -> (MODULE, ARGS): the only form that can run in this process."""
    if len(command) >= 3 and os.path.basename(command[0]).startswith("python") and command[1] == "-m":
        return command[2], command[3:]
    raise SystemExit(f"launch.py: the server command must be 'python3 -m MODULE ...', got {command[:3]!r}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit("launch.py: usage: launch.py [--api-key-file F] [--hf-token-file F] -- python3 -m MODULE ...")
    split = argv.index("--")
    ap = argparse.ArgumentParser(prog="launch.py", description=__doc__.splitlines()[0])
    ap.add_argument("--api-key-file", default="")
    ap.add_argument("--hf-token-file", default="")
    opts = ap.parse_args(argv[:split])
    module, args = module_of(argv[split + 1 :])
    if any(a == "--api-key" or a.startswith("--api-key=") for a in args):
        raise SystemExit("launch.py: --api-key on the command line would be visible in ps; use --api-key-file")
    key = _read_secret(opts.api_key_file, "API key") if opts.api_key_file else ""
    token = _read_secret(opts.hf_token_file, "HF token") if opts.hf_token_file else ""
    redact_logs([key, token])
    if token:
        os.environ["HF_TOKEN"] = token
    sys.argv = [module, *args, *(["--api-key", key] if key else [])]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
