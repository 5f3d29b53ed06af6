"""Entry point: ``python -m testengine [SGLang launch_server flags] [--engine-* knobs]``."""

from __future__ import annotations

import logging
import sys

from aiohttp import web

import sglangflags

from . import flags
from .config import VERSION_STRING, ConfigError, parse_args
from .flashinfer_cache import CacheState
from .server import EngineServer


def main(argv: list[str] | None = None) -> int:
    """Start the test engine; logs go to stderr (docker logs), like SGLang's."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"
    )
    log = logging.getLogger("testengine")
    args = sys.argv[1:] if argv is None else argv
    refused = flags.check(args)
    if refused:  # what the claimed release's argparse would print, and its exit code
        print("usage: launch_server.py [-h] ...", file=sys.stderr)
        print(refused, file=sys.stderr)
        return 2
    try:
        cfg = parse_args(args)
    except ConfigError as exc:
        print(f"test engine: {exc}", file=sys.stderr)
        return 2
    log.info("%s starting on %s:%s", VERSION_STRING, cfg.server_args["host"], cfg.server_args["port"])
    if cfg.unknown_args:
        log.warning("test engine: unrecognized launch_server arguments recorded, not used: %s", cfg.unknown_args)
    if cfg.faults.describe():
        log.warning("test engine: fault modes active: %s", ", ".join(cfg.faults.describe()))
    k = cfg.knobs
    build = sglangflags.kernel_build(flags.posed_version(), args).id
    cache = CacheState.probe(k.cache_dir, k.flashinfer_version, k.arch, build)
    server = EngineServer(cfg, cache)
    web.run_app(
        server.build_app(),
        host=cfg.server_args["host"],
        port=cfg.server_args["port"],
        print=None,
        access_log=None,
        handle_signals=True,
        shutdown_timeout=1.0,  # a hung (fault) handler must not delay docker stop
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
