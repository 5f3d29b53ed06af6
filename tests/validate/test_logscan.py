"""The log scan finds every crash text the test engine can write, and the first one first."""

from __future__ import annotations

import pytest

from testengine.signatures import SIGNATURES
from validate.logscan import scan_logs

EXPECTED = {
    "page_table": "page_table_1_flattened",
    "cuda": "cuda_error",
    "nccl": "nccl_error",
    "oom": "oom",
    "nan": "nan_in_decode",
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_each_engine_signature_is_found(tmp_path, name):
    log = tmp_path / "server.log"
    log.write_text("[info] The server is fired up and ready to roll!\n" + SIGNATURES[name]() + "[info] more\n")
    res = scan_logs([str(log)])
    assert res.first is not None
    assert res.first.signature == EXPECTED[name]
    assert res.first.line in log.read_text()
    assert res.first.context  # lines around the match


def test_clean_log_has_no_match_and_extra_signatures_apply(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO: 127.0.0.1 GET /health 200\nWARNING: custom-widget exploded\n")
    assert scan_logs([str(log)]).first is None
    res = scan_logs([str(log)], {"widget": r"custom-widget exploded"})
    assert res.first is not None and res.first.signature == "widget" and res.first.line_no == 2


def test_unreadable_file_is_reported_not_raised(tmp_path):
    res = scan_logs([str(tmp_path / "missing.log")])
    assert res.first is None and res.errors
