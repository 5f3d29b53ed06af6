# ruff: noqa: E501  (log lines are copied verbatim)
"""The log scan against texts copied from the real releases, never against what the test engine writes.

Each line below is what the named source prints (the f-string or %-format filled in as
the caller fills it); the recorded logs of a real SGLang 0.5.17 server must match nothing.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from _gate_helpers import stub_docker

from validate.logscan import MAX_MATCHES, scan_logs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"

REAL_LINES = [
    # sglang 0.5.9-0.5.16 layers/sampler.py: logger.warning(...) then raise ValueError(...)
    ("[2026-12-02 18:40:01 TP0] Detected errors during sampling! NaN in the logits.", "nan_in_decode"),
    ("ValueError: Detected errors during sampling! NaN in the logits.", "nan_in_decode"),
    # sglang 0.5.17-0.5.23 utils/async_probe.py _AsyncNanWarner (msg from sampler.py: "sampler: next_token_logits")
    (
        "[2026-12-02 18:40:01 TP0] NaN detected in sampler: next_token_logits; values were sanitized before sampling. "
        "This usually indicates numerical overflow (e.g. fp16 activations) or an upstream bug producing NaN. "
        "Logged once; further occurrences are silent.",
        "nan_in_decode",
    ),
    # sglang 0.5.17-0.5.23 utils/async_probe.py maybe_detect_nan: f"NaN detected! {msg}"
    ("RuntimeError: NaN detected! verify: target model logits", "nan_in_decode"),
    # sglang 0.5.6-0.5.23: forward_mha.py reads forward_metadata.page_table_1_flattened of a flashinfer backend
    ("AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'", "page_table_1_flattened"),
    # sglang 0.5.9-0.5.23 forward_mha.py: assert ..., "page_table_1_flattened should have been generated for FP8 MHA path"
    ("AssertionError: page_table_1_flattened should have been generated for FP8 MHA path", "page_table_1_flattened"),
    # sglang 0.5.17-0.5.23 dsa_backend.py: the bare assert's source line in the traceback
    ("    assert page_table_1_flattened is not None", "page_table_1_flattened"),
    # PyTorch multinomial (aten/src/ATen/native/Distributions.cpp)
    ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", "invalid_probabilities"),
    ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered", "cuda_error"),
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda_error"),
    # sglang 0.5.9-0.5.23 distributed/device_communicators/pynccl_wrapper.py: raise RuntimeError(f"NCCL error: {error_str}")
    ("RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)", "nccl_error"),
    # PyTorch ProcessGroupNCCL.cpp watchdog
    (
        "[rank3]:[E1202 18:40:01.000000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600023 "
        "milliseconds before timing out.",
        "nccl_error",
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 94.97 GiB",
        "oom",
    ),
    # sglang 0.5.17 model_executor/pool_configurator.py
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "oom"),
    # the NVIDIA kernel driver (dmesg)
    ("[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=2394, name=python3, GPU has fallen off the bus.", "xid"),
    # sglang 0.5.9-0.5.23 managers/scheduler.py: logger.error(f"Scheduler hit an exception: {traceback}")
    ("[2026-12-02 18:40:01 TP0] Scheduler hit an exception: Traceback (most recent call last):", "scheduler_exception"),
    # sglang 0.5.17 entrypoints/engine.py
    (
        "[2026-12-02 18:40:01] Received sigquit from a child process. It usually means the child failed.",
        "scheduler_exception",
    ),
]

BENIGN = [
    "[2026-12-02 18:36:59 TP0] [AR] All-reduce call path: NCCL (custom AR disabled)",  # 0.5.17 parallel_state.py
    "[2026-12-02 18:37:05] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.5",
    "server_args=ServerArgs(model_path='/tmp/model', tokenizer_path='/tmp/model', max_prefill_tokens=16384)",
    'INFO:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK',
    "generated text: Bra nan enumeration",  # 'nan' as a word in model output is no crash
]


@pytest.mark.parametrize(("line", "signature"), REAL_LINES, ids=[s + f"-{i}" for i, (_, s) in enumerate(REAL_LINES)])
def test_real_crash_text_is_found(tmp_path, line, signature):
    log = tmp_path / "server.log"
    log.write_text("[info] The server is fired up and ready to roll!\n" + line + "\n[info] more\n")
    res = scan_logs([str(log)])
    assert res.first is not None and res.first.signature == signature
    assert res.first.line_no == 2 and res.first.line == line.strip()[:500]
    assert res.counts == {signature: 1}


@pytest.mark.parametrize(
    "name",
    [
        "server_startup.log",
        "server_restart.log.tail",
        # 2026-12-03 (benchmarks/gpu/real_sglang.py): cold and warm start with the cache role's
        # layout, and a queue overflow (835 requests, most refused): refusals are no crash.
        "../sglang-0.5.17-h200-2026-12-03/server_cold_start.log",
        "../sglang-0.5.17-h200-2026-12-03/server_warm_start.log",
        "../sglang-0.5.17-h200-2026-12-03/server_overflow.log",
    ],
)
def test_recorded_healthy_logs_match_nothing(name):
    res = scan_logs([str(FIXTURES / name)])
    assert res.lines_scanned > 20 and res.matches == [] and res.errors == []


def test_benign_lines_match_nothing(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(BENIGN) + "\n")
    assert scan_logs([str(log)]).matches == []


def test_specific_error_is_reported_before_the_generic_traceback_header(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "a\n"
        "[2026-12-02 18:40:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "forward_mha.py", line 598, in _get_mla_kv_buffer_from_fp8_for_nsa\n'
        "AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'\n"
        "b\nc\nd\ne\n"
    )
    res = scan_logs([str(log)], context_lines=2)
    assert res.first is not None and res.first.signature == "page_table_1_flattened" and res.first.line_no == 4
    assert res.first.context == [
        "[2026-12-02 18:40:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "forward_mha.py", line 598, in _get_mla_kv_buffer_from_fp8_for_nsa',
        "AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'",
        "b",
        "c",
    ]
    assert res.counts == {"scheduler_exception": 1, "page_table_1_flattened": 1}


def test_extra_signatures_apply_and_unreadable_file_is_an_error(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO: 127.0.0.1 GET /health 200\nWARNING: custom-widget exploded\n")
    assert scan_logs([str(log)]).first is None
    res = scan_logs([str(log)], {"widget": r"custom-widget exploded"})
    assert res.first is not None and res.first.signature == "widget" and res.first.line_no == 2
    res = scan_logs([str(tmp_path / "missing.log")])
    assert res.first is None and len(res.errors) == 1 and "missing.log" in res.errors[0]


def test_a_large_log_is_scanned_in_bounded_memory(tmp_path):
    """A log with thousands of matches and one 3 MB line: memory stays far below the file's size."""
    log = tmp_path / "big.log"
    filler = (
        "[2026-12-02 18:40:01 TP0] Decode batch. #running-req: 256, #token: 65536, gen throughput (token/s): 1900.0\n"
    )
    with open(log, "w") as f:
        for i in range(100_000):
            f.write(filler)
            if i % 100 == 0:
                f.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
        f.write("x" * 3_000_000 + "\n")
        f.write("torch.OutOfMemoryError: CUDA out of memory.\n")
    assert log.stat().st_size > 13_000_000
    tracemalloc.start()
    res = scan_logs([str(log)])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert res.counts == {"cuda_error": 1000, "oom": 1}
    assert len(res.matches) == MAX_MATCHES
    assert peak < 4_000_000, f"peak {peak:,} bytes"


def test_report_dict_names_the_first_specific_match_and_caps_the_list(tmp_path):
    log = tmp_path / "server.log"
    lines = ["[2026-12-02 18:40:01 TP0] Scheduler hit an exception: Traceback (most recent call last):"] + [
        "RuntimeError: CUDA error: an illegal memory access was encountered"
    ] * 25
    log.write_text("\n".join(lines) + "\n")
    res = scan_logs([str(log)], context_lines=1)
    out = res.to_dict()
    assert out["files"] == [str(log)] and out["lines_scanned"] == 26 and out["errors"] == []
    assert out["counts"] == {"scheduler_exception": 1, "cuda_error": 25}
    # the generic traceback header comes first in the file, the specific error names the failure
    assert out["first_match"] == {
        "signature": "cuda_error",
        "file": str(log),
        "line_no": 2,
        "line": lines[1],
        "context": [lines[0], lines[1], lines[2]],
    }
    assert len(res.matches) == 26 and len(out["matches"]) == 20
    assert out["matches"][0]["line_no"] == 1 and out["matches"][19]["line_no"] == 20
    assert scan_logs([str(tmp_path / "none.log")]).to_dict()["first_match"] is None


def test_lines_strip_crlf_replace_bad_bytes_and_split_huge_lines(tmp_path):
    from validate.logscan import MAX_LINE, _lines

    log = tmp_path / "server.log"
    log.write_bytes(b"one\r\ntw\xffo\n" + b"x" * (MAX_LINE + 10) + b"\nlast")
    got = [line for _, line in _lines(str(log))]
    assert got[:2] == ["one", "tw\ufffdo"]
    assert [len(g) for g in got[2:4]] == [MAX_LINE, 10] and got[4] == "last" and len(got) == 5
    # each line with the byte offset it starts at (where the gate's start splits a log)
    assert [pos for pos, _ in _lines(str(log))] == [0, 5, 10, 10 + MAX_LINE, 10 + MAX_LINE + 11]


def test_matches_keep_file_order_context_is_capped_and_lines_are_counted_across_files(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    long_prefix = "p" * 600
    a.write_text(f"{long_prefix}\n  torch.OutOfMemoryError: CUDA out of memory.  \n")
    b.write_text("ok\nRuntimeError: NCCL error in: x, unhandled system error\nafter1\nafter2\n")
    res = scan_logs([str(a), str(b)], context_lines=1)
    assert res.lines_scanned == 6
    assert [(m.file, m.line_no, m.signature) for m in res.matches] == [(str(a), 2, "oom"), (str(b), 2, "nccl_error")]
    oom = res.matches[0]
    assert oom.line == "torch.OutOfMemoryError: CUDA out of memory." and oom.context[0] == "p" * 500
    assert oom.context == ["p" * 500, "  torch.OutOfMemoryError: CUDA out of memory.  "]  # no line after it in a.log
    assert res.matches[1].context == ["ok", "RuntimeError: NCCL error in: x, unhandled system error", "after1"]
    assert scan_logs([str(b)], context_lines=0).matches[0].context == [
        "RuntimeError: NCCL error in: x, unhandled system error"
    ]


def test_two_close_matches_each_get_the_lines_after_them(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "torch.OutOfMemoryError: CUDA out of memory.\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "x1\nx2\nx3\n"
    )
    first, second = scan_logs([str(log)], context_lines=2).matches
    assert first.context == [
        "torch.OutOfMemoryError: CUDA out of memory.",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "x1",
    ]
    assert second.context == [
        "torch.OutOfMemoryError: CUDA out of memory.",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "x1",
        "x2",
    ]


def fetch_container_log(name, dest, since, timeout_s=30.0):
    import asyncio

    from validate import logscan

    return asyncio.run(logscan.fetch_container_log(name, dest, since, timeout_s))


def test_container_log_is_streamed_to_a_file_with_since(tmp_path, monkeypatch):
    argv = stub_docker(tmp_path, monkeypatch, 'echo "stdout line"; echo "stderr line" >&2')
    dest = tmp_path / "report" / "container-x.log"
    assert fetch_container_log("mol-sglang", dest, "2026-12-03T10:00:00Z") is None
    assert argv.read_text().split("\n")[:4] == ["logs", "--since", "2026-12-03T10:00:00Z", "mol-sglang"]
    assert dest.read_text() == "stdout line\nstderr line\n"  # both streams: SGLang logs to stderr
    assert fetch_container_log("mol-sglang", dest, None) is None
    assert argv.read_text().split("\n")[:2] == ["logs", "mol-sglang"]


def test_container_log_failure_is_an_error_text_not_an_exception(tmp_path, monkeypatch):
    stub_docker(tmp_path, monkeypatch, 'echo "Error: No such container: gone" >&2; exit 1')
    err = fetch_container_log("gone", tmp_path / "c.log", None)
    assert err == "docker logs gone: Error: No such container: gone"
    slow = tmp_path / "bin" / "docker"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    t0 = time.monotonic()
    err = fetch_container_log("slow", tmp_path / "c.log", None, timeout_s=0.5)
    assert time.monotonic() - t0 < 3  # killed at its deadline, not waited for
    assert err == "docker logs slow: did not finish within 0.5s (the time left before the deadline)"
    assert fetch_container_log("slow", tmp_path / "c.log", None, timeout_s=0) == (
        "docker logs slow: not fetched, no time left before the gate's deadline_s"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    err = fetch_container_log("x", tmp_path / "c.log", None)
    assert err is not None and err.startswith("docker logs x: ") and "docker" in err[len("docker logs x: ") :]


def test_container_log_path_is_a_safe_file_name_in_the_report(tmp_path):
    from validate.logscan import container_log_path

    assert container_log_path(tmp_path, "mol-sglang.h1") == tmp_path / "container-mol-sglang.h1.log"
    assert container_log_path(str(tmp_path), "a/b c:d") == tmp_path / "container-a_b_c_d.log"


def test_long_lines_are_cut_at_500_characters_everywhere(tmp_path):
    log = tmp_path / "server.log"
    crash = "RuntimeError: CUDA error: an illegal memory access was encountered " + "y" * 600
    oom = "torch.OutOfMemoryError: CUDA out of memory. " + "z" * 600
    log.write_text(f"{crash}\n{oom}\n{'a' * 700}\nX end\n")
    first, second = scan_logs([str(log)]).matches  # the default: 3 lines of context each side
    assert first.line == crash[:500] and first.context == [crash[:500], oom[:500], "a" * 500, "X end"]
    assert second.line == oom[:500] and second.context == [crash[:500], oom[:500], "a" * 500, "X end"]
    assert len(first.context) == 4  # the default context is 3 lines before and after


def test_the_default_context_is_three_lines_before_and_after(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("b1\nb2\nb3\nb4\ntorch.OutOfMemoryError: CUDA out of memory.\na1\na2\na3\na4\n")
    (m,) = scan_logs([str(log)]).matches
    assert m.context == ["b2", "b3", "b4", "torch.OutOfMemoryError: CUDA out of memory.", "a1", "a2", "a3"]


def test_line_ends_are_the_only_thing_stripped(tmp_path):
    from validate.logscan import _lines

    log = tmp_path / "server.log"
    log.write_bytes(b"endsX\nXstarts\r\n")
    assert list(_lines(str(log))) == [(0, "endsX"), (6, "Xstarts")]


def test_an_unreadable_file_is_named_with_the_reason(tmp_path):
    missing = tmp_path / "gone.log"
    assert scan_logs([str(missing)]).errors == [f"{missing}: No such file or directory"]


def test_container_log_goes_into_folders_that_do_not_exist_yet_and_long_errors_are_cut(tmp_path, monkeypatch):
    from validate.logscan import container_log_path

    stub_docker(tmp_path, monkeypatch, "echo ok")
    dest = tmp_path / "reports" / "h1" / "run" / "container-x.log"
    assert fetch_container_log("x", dest, None) is None and dest.read_text() == "ok\n"
    (tmp_path / "bin" / "docker").write_text("#!/bin/sh\nprintf 'E%.0s' $(seq 1 400) >&2\nexit 1\n")
    err = fetch_container_log("x", dest, None)
    assert err == "docker logs x: " + "E" * 300
    assert container_log_path(tmp_path, "Mol-SGLang") == tmp_path / "container-Mol-SGLang.log"


def test_a_backtracking_pattern_cannot_hang_the_scan(tmp_path):
    """``(a+)+b`` on a long line of ``a`` takes exponential time in Python's re; RE2 runs it in linear time."""
    from validate.logscan import scan_logs

    log = tmp_path / "server.log"
    log.write_text("a" * 60_000 + "\n" + "INFO ok\n" + "a" * 30 + "b\n")
    t0 = time.monotonic()
    res = scan_logs([str(log)], {"runaway": "(a+)+b"}, 0)
    assert time.monotonic() - t0 < 5  # Python's re would not finish this line in any lifetime
    assert res.counts == {"runaway": 1} and res.matches[0].line_no == 3


def test_start_banners_count_from_the_gates_own_start(tmp_path):
    from validate.logscan import scan_logs

    banner = "INFO:     Started server process [{}]\n"
    full = tmp_path / "server.log"  # start-up included, up to the gate's start: one banner is the start itself
    full.write_text(banner.format(614) + "ready\n")
    window = tmp_path / "window.log"  # only the gate's window: any banner is a restart
    window.write_text(banner.format(901))
    res = scan_logs([str(full), str(window)], None, 0, {str(full): full.stat().st_size})
    assert (res.starts_before, res.starts_during) == ({str(full): 1, str(window): 0}, {str(full): 0, str(window): 1})
    assert res.restarts == [f"{window}: 1 start banner(s) ('Started server process [') after the gate began"]
    assert res.earlier_starts == [] and res.offsets == {str(full): full.stat().st_size, str(window): 0}
    # a log that holds an earlier run of the server before the gate (an accumulating file): reported as such
    kept = tmp_path / "kept.log"
    kept.write_text(banner.format(500) + "crash\n" + banner.format(614) + "ready\n")
    at_start = kept.stat().st_size
    res = scan_logs([str(kept)], None, 0, {str(kept): at_start})
    assert res.restarts == [] and res.earlier_starts == [f"{kept}: 2 starts before the gate began"]
    # ... and one that starts again after the gate began: a restart during the gate, on top
    with kept.open("a") as f:
        f.write(banner.format(777))
    res = scan_logs([str(kept)], None, 0, {str(kept): at_start})
    assert res.restarts == [f"{kept}: 1 start banner(s) ('Started server process [') after the gate began"]
    assert res.earlier_starts == [f"{kept}: 2 starts before the gate began"]
    # a banner that starts exactly at the offset is after it (the first byte written after the gate began)
    res = scan_logs([str(kept)], None, 0, {str(kept): at_start + 1})
    assert res.starts_during == {str(kept): 0} and res.starts_before == {str(kept): 3}


def test_the_scan_stops_at_its_deadline_and_says_where(tmp_path):
    from validate.logscan import scan_logs

    log = tmp_path / "big.log"
    log.write_text("INFO ok\n" * 10_000)
    res = scan_logs([str(log)], None, 0, None, time.monotonic() - 1)  # already past
    assert res.errors == [f"{log}: scan stopped at line 4,096 by the gate's deadline_s"]
    assert res.lines_scanned == 4096
    whole = scan_logs([str(log)], None, 0, None, time.monotonic() + 60)
    assert whole.errors == [] and whole.lines_scanned == 10_000


def test_user_patterns_need_re2_and_say_so_without_it(monkeypatch):
    from validate import userregex

    p = userregex.compile_user_regex(r"NCCL (error|timeout)")
    assert p.search("x NCCL timeout y") and not p.search("NCCL ok") and p.pattern == r"NCCL (error|timeout)"
    with pytest.raises(userregex.UserRegexError) as exc:
        userregex.compile_user_regex("(?<=a)b")
    assert str(exc.value).startswith("not a pattern RE2 accepts (no backreferences or look-around): ")
    assert "\\\\" not in str(exc.value) and "b'" not in str(exc.value)  # RE2's bytes message, decoded
    monkeypatch.setattr(userregex, "_re2", None)  # an older serving image without google-re2
    with pytest.raises(userregex.UserRegexError) as exc:
        userregex.compile_user_regex("x")
    assert str(exc.value) == "needs google-re2 (a linear-time regex engine) installed where the gate runs"
    builtin = userregex.compile_builtin(r"CUDA error: \w+")
    assert type(builtin).__module__ == "re" and builtin.search("CUDA error: illegal")


def test_a_refused_pattern_is_reported_once_by_name_and_re2_stays_quiet(capfd):
    from validate import userregex

    capfd.readouterr()
    with pytest.raises(userregex.UserRegexError) as exc:
        userregex.compile_user_regex(r"(a)\1")
    assert (
        str(exc.value) == r"not a pattern RE2 accepts (no backreferences or look-around): invalid escape sequence: \1"
    )
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # RE2's own "Error parsing" line would land in the gate's log
    builtin = userregex.compile_builtin(r"CUDA error: \w+")
    assert type(builtin).__module__ == "re2" and builtin.search("CUDA error: illegal")


def test_an_engine_error_in_text_or_undecodable_bytes_is_still_named(monkeypatch):
    from validate import userregex

    class Engine:  # RE2's binding raises its error with a bytes message; anything else is read as text
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        def Options(self):  # RE2 spells it so
            return type("Options", (), {})()

        def compile(self, pattern, options):
            raise self.exc

    monkeypatch.setattr(userregex, "_re2", Engine(TypeError("pattern must be str")))
    with pytest.raises(userregex.UserRegexError) as exc:
        userregex.compile_user_regex("x")
    assert str(exc.value).endswith("look-around): pattern must be str")
    monkeypatch.setattr(userregex, "_re2", Engine(ValueError(b"bad \xff byte")))
    with pytest.raises(userregex.UserRegexError) as exc:
        userregex.compile_user_regex("x")
    assert str(exc.value).endswith("look-around): bad \ufffd byte")


def test_the_scan_reports_offsets_and_starts_each_side_of_the_gates_start(tmp_path):
    from validate.logscan import scan_logs

    log = tmp_path / "server.log"
    log.write_text("INFO:     Started server process [1]\nINFO:     Started server process [2]\n")
    half = len("INFO:     Started server process [1]\n")
    d = scan_logs([str(log)], None, 0, {str(log): half}).to_dict()
    assert d == {
        "files": [str(log)],
        "lines_scanned": 2,
        "counts": {},
        "first_match": None,
        "matches": [],
        "errors": [],
        "offsets": {str(log): half},
        "starts_before": {str(log): 1},
        "starts_during": {str(log): 1},
        "restarts": [f"{log}: 1 start banner(s) ('Started server process [') after the gate began"],
        "earlier_starts": [],
    }
