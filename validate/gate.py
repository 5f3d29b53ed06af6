"""The gate: run the phases in order (validate/phases.py), judge each (validate/checks.py), build the report.

Order: readiness, server info, sampler warm-up, answers (probes, reference answers), accuracy,
single stream, throughput (repeated), stability sweep, then the output check, the log scan and
the baseline. A phase that finds the server dead, wedged or stalled stops the phases after it
(listed as skipped), so a broken host fails quickly and says where it broke. The verdict is
"pass" only when every check passed.

Bounded until the end: ``deadline_s`` bounds the whole gate, report included. Measuring stops
``reserve`` seconds before it (a tenth of it, at most a minute), which leaves the log fetch and
scan, the judging, the baseline's lock and the report their own share; the signal handlers stay
in place until the report is written (:meth:`Gate.run_then`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from . import __version__ as GATE_VERSION
from . import baseline as baseline_store
from . import checks as judge
from .checks import Check
from .client import make_session
from .config import GateConfig
from .limits import raise_open_files
from .logscan import DOCKER_PREFIX, LogScanResult, container_log_path, fetch_container_log, scan_logs
from .metrics import KEY_METRICS, METRIC_DEFINITIONS
from .phases import Measurements, Measurer, ScoredAnswer, StabilityStep, accuracy_settings, reference_prompts
from .serverinfo import TEST_ENGINE_NOTE

SCHEMA_VERSION = 3
T = TypeVar("T")
NO_LOG = "logs: no --log file given"  # skipped: the gate read no log (finalize may read one later)


def reserve_s(deadline_s: float) -> float:
    """Seconds kept after measuring for the log fetch and scan, the judges and the report."""
    return min(60.0, deadline_s / 10)


@dataclass
class GateOptions:
    url: str
    config: GateConfig
    config_path: str
    logs: list[str] = field(default_factory=list)
    baseline_path: str | None = None
    patch_record: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    report_dir: str | None = None
    model: str | None = None  # --model: the served model the gate expects (overrides the config's)


def key_metrics(tp: dict[str, Any] | None, ss: dict[str, Any] | None) -> dict[str, float | None]:
    """What a baseline compares: the throughput medians and the single-stream speed."""
    tp, ss = tp or {}, ss or {}
    lat = bool(tp.get("completed"))  # latencies of zero completed requests are not measurements
    return {
        "total_token_throughput": tp.get("total_throughput"),
        "output_token_throughput": tp.get("output_throughput"),
        "request_throughput": tp.get("request_throughput"),
        "single_stream_decode_tok_s": ss.get("decode_tok_s") if ss.get("success") else None,
        "p99_ttft_ms": tp.get("p99_ttft_ms") if lat else None,
        "p99_e2e_latency_ms": tp.get("p99_e2e_latency_ms") if lat else None,
        "mean_e2e_latency_ms": tp.get("mean_e2e_latency_ms") if lat else None,
    }


def key_noise(tp: dict[str, Any] | None, ss: dict[str, Any] | None) -> dict[str, float | None]:
    """How much each key metric's median could move by chance: its runs' relative standard error."""
    spread = (tp or {}).get("spread") or {}
    out = {k: (spread.get(k) or {}).get("noise") for k in KEY_METRICS}
    out["single_stream_decode_tok_s"] = (ss or {}).get("noise")
    return out


@dataclass
class GroupReference:
    """What ``--baseline`` holds: the group's reference, none yet, or why it cannot be read."""

    path: str
    reference: baseline_store.Reference | None = None
    error: str = ""

    @classmethod
    def read(cls, path: str) -> GroupReference:
        try:
            found = baseline_store.load(path)
        except baseline_store.BaselineError as exc:
            return cls(path, error=str(exc))
        return cls(path, found.reference if found else None)

    def why_not(self, engine: str) -> str:
        """Why nothing of this reference can be compared with a gate on ``engine`` ("" when it can)."""
        if self.error:
            return f"the group's reference cannot be read: {self.error}"
        ref = self.reference
        if ref is not None and ref.engine != engine:
            return f"the reference was measured on engine {ref.engine!r}, this server is {engine!r}"
        return ""

    def part(self, engine: str, name: str, label: str, settings_now: dict[str, Any]) -> tuple[Any, str, str]:
        """(the stored part, when the reference is from, why it cannot be compared) for ``name`` ("answers",
        "accuracy"); (None, "", "") when the group has no reference yet (this gate records)."""
        ref = self.reference
        why = self.why_not(engine)
        if ref is None or why:
            return None, ref.started_at if ref else "", why
        stored = getattr(ref, name)
        when = ref.started_at or "an unknown time"
        if stored is None:
            return (
                None,
                ref.started_at,
                f"the group's reference (from {when}) has no {label} (written by an older gate, or with it off)",
            )
        then = baseline_store.answer_settings(stored) if name == "answers" else stored.get("settings") or {}
        changed = baseline_store.changes(then, settings_now)
        if changed:
            return (
                None,
                ref.started_at,
                f"{label} settings changed since the reference (from {when}): " + "; ".join(changed),
            )
        return stored, ref.started_at, ""


def compare_baseline(
    group: GroupReference | None,
    engine: str,
    config: GateConfig,
    now: dict[str, float | None],
    noise: dict[str, float | None] | None = None,
) -> tuple[dict[str, Any], list[Check]]:
    """The key metrics against the group's reference (read after the load: a wave's first gate may have
    written it). ``baseline.reference`` says whether they could be compared, and why not."""
    if group is None:
        return {"path": None, "used": False, "note": "no --baseline given: no regression check"}, []
    info: dict[str, Any] = {"path": group.path, "used": False}
    ref = group.reference
    why = group.why_not(engine)
    if not why and ref is not None:
        mine = baseline_store.workload(config.model_dump())
        changed = baseline_store.changes(ref.workload, mine)
        if changed:
            why = "the workload changed since the reference was measured: " + "; ".join(changed)
    first = judge.group_reference(group.path, why, ref.started_at if ref is not None else None)
    info["note"] = first.message
    if ref is None or why:
        return info, [first]
    info.update(
        used=True,
        reference={"started_at": ref.started_at, "labels": ref.labels, "how": ref.how},
        tolerance=config.baseline.tolerance,
        values={k: {"baseline": ref.key_metrics.get(k), "measured": now.get(k)} for k in config.baseline.metrics},
    )
    return info, [first, *judge.baseline(ref.key_metrics, now, config, ref.noise, noise or {})]


async def scan(
    logs: list[str],
    config: GateConfig,
    report_dir: str | None,
    since: str | None,
    offsets: dict[str, int] | None = None,
    deadline: float | None = None,
) -> LogScanResult:
    """Scan log files; ``docker:NAME`` entries are fetched now (``--since`` the gate's start) next to the report.

    ``offsets``: each file's size when the gate started (a fetched window file starts at 0);
    ``deadline`` (``time.monotonic()``): the fetch and the scan end by then."""
    files: list[str] = []
    errors: list[str] = []
    for entry in logs:
        if not entry.startswith(DOCKER_PREFIX):
            files.append(entry)
            continue
        name = entry[len(DOCKER_PREFIX) :]
        dest = container_log_path(report_dir or ".", name)
        left = deadline - time.monotonic() if deadline is not None else 300.0
        err = await fetch_container_log(name, dest, since, left)
        if err:
            errors.append(err)
        else:
            files.append(str(dest))
    lc = config.logs
    res = scan_logs(files, {s.name: s.pattern for s in lc.extra_signatures}, lc.context_lines, offsets, deadline)
    res.errors = errors + res.errors
    return res


def _sizes(logs: list[str]) -> dict[str, int]:
    """Each log file's size now (the gate's start): banners before it are starts before the gate."""
    out = {}
    for entry in logs:
        if not entry.startswith(DOCKER_PREFIX):
            with contextlib.suppress(OSError):
                out[entry] = os.path.getsize(entry)
    return out


class Gate:
    """Runs every phase against ``opts.url``, judges each, and builds the report dict."""

    def __init__(self, opts: GateOptions, say: Callable[[str], None]) -> None:
        self.o = opts
        self.c = opts.config
        self.say = say
        self.base = opts.url.rstrip("/")
        self.checks: list[Check] = []
        self.skipped: list[str] = []
        self.m = Measurements()
        self.down = ""  # why the phases after this point are skipped ("" while the server is fine)
        self.phase = "start"
        self.stopped = ""  # why the gate stopped measuring early (deadline, signal, its own error)
        self.interrupted = False  # a signal or the final deadline: nothing optional after it, only the report
        self.step_passed: dict[int, bool] = {}  # stability step number -> the judge's verdict
        self.confirmation: dict[str, Any] | None = None  # what _confirm measured again, and why
        self.t0 = time.monotonic()
        self.group: GroupReference | None = None  # read before the answers phases (and again after the load)
        self.offsets: dict[str, int] = {}
        self._task: asyncio.Future[Any] | None = None
        self._measuring = False

    def remaining(self) -> float:
        """Seconds left before ``deadline_s``, from the gate's start."""
        return self.t0 + self.c.deadline_s - time.monotonic()

    def _add(self, *found: Check | None) -> None:
        for check in found:
            if check is not None:
                self.checks.append(check)
                if not check.passed:
                    self.say(check.message)

    def _health(self, phase: str, h: Any) -> None:
        self.m.health.append(h)
        c = judge.health(phase, h)
        self._add(c)
        if c is not None and not self.down:
            self.down = "the server was down or wedged"

    def _stall(self, what: str) -> None:
        """Requests hit their deadline while /health may still answer: a stalled server; stop here."""
        if not self.down:
            self.down = f"the server stalled ({what})"

    def _container(self) -> str | None:
        return next((e[len(DOCKER_PREFIX) :] for e in self.o.logs if e.startswith(DOCKER_PREFIX)), None)

    async def _identity(self, mm: Measurer, when: str) -> None:
        """Read who the server is now; a change since the first read is a restart (later phases skipped)."""
        ident = await mm.identity(when)
        self.m.identities.append(ident)
        first = self.m.identities[0]
        if ident.facts and first.facts and ident.facts != first.facts and not self.down:
            self.down = f"the server restarted (seen {when})"
            self.say(f"the server's identity changed {when}: it restarted; the phases after this are skipped")

    def _open_files(self) -> None:
        c = self.c
        tp = c.throughput
        biggest = max(
            [1]  # the single stream and the probes
            + ([min(tp.num_prompts, tp.max_concurrency or tp.num_prompts)] if tp.enabled else [])
            + (list(c.stability.concurrency) if c.stability.enabled else [])
            + ([min(c.accuracy.concurrency, c.accuracy.questions)] if c.accuracy.enabled else [])
        )
        self.m.file_limit = raise_open_files(biggest)
        if self.m.file_limit.adjusted:
            self.say(self.m.file_limit.note)

    def _warmed(self) -> tuple[str, float] | None:
        """The sampled phase the warm-up warms, and its deadline (the warm-up waits no longer); None: none samples."""
        if self.c.throughput.enabled:
            return "throughput.timeout_s", self.c.throughput.timeout_s
        if self.c.stability.enabled:
            return "stability.step_timeout_s", self.c.stability.step_timeout_s
        return None

    async def _measure(self) -> None:
        async with make_session() as session:
            mm = Measurer(session, self.base, self.c, self.say, self._container())
            self.phase = "readiness"
            self.m.readiness = await mm.readiness()
            self._add(judge.readiness(self.m.readiness, self.c.readiness.timeout_s))
            if not self.m.readiness.ready:
                self.down = "the server never became ready"
            else:
                self.phase = "server info"
                self.m.server = await mm.server_info()
                if self.m.server.summary["engine"] == "test-engine":
                    self.say("NOTE: " + TEST_ENGINE_NOTE)
                model_check = judge.model(self.o.model or self.c.model, self.m.server.names)
                self._add(model_check)
                if not model_check.passed:
                    self.down = "the server serves another model"
                await self._identity(mm, "after readiness")
                self._health("readiness", await mm.health("after readiness"))
            warmed = self._warmed()
            if warmed is None:
                self.skipped.append("sampler_warmup: no sampled phase runs (throughput and stability are off)")
            elif not self.down:
                self.phase = "sampler warm-up"
                self.m.warmup = await mm.sampler_warmup(warmed[1], warmed[0])
                self._add(judge.sampler_warmup(self.m.warmup))
                if not self.m.warmup.ok:  # a server that hangs or dies at its first request stops the gate here
                    self._health("sampler_warmup", await mm.health("after the failed warm-up request"))
                    if self.m.warmup.request.failure == "timeout":
                        self._stall("the sampled warm-up request did not finish")
            off = "disabled in config"
            phases = [
                ("answers", self._answers_off(), self._answers),
                ("accuracy", "" if self.c.accuracy.enabled else off, self._accuracy),
                ("single_stream", "" if self.c.single_stream.enabled else off, self._single_stream),
                ("throughput", "" if self.c.throughput.enabled else off, self._throughput),
                ("stability", "" if self.c.stability.enabled else off, self._stability),
            ]
            for name, why_not, fn in phases:
                if why_not:
                    self.skipped.append(f"{name}: {why_not}")
                    continue
                if self.down:
                    self.skipped.append(f"{name}: skipped, {self.down}")
                    continue
                self.phase = name
                try:
                    await fn(mm)
                except Exception as exc:  # a gate bug in one phase: fail it, keep the report
                    text = f"FAILED {name}: gate error {exc.__class__.__name__}: {exc}"
                    self._add(Check(f"{name}.error", False, None, None, "", text))
                await self._identity(mm, f"after {name}")
            if not self.down:
                await self._confirm(mm)
            self.phase = "logs"

    def _key_figures(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any], dict[str, Any]]:
        """The phases the baseline reads (throughput, single stream) and their key metrics and noise."""
        tp = self.m.throughput.to_dict() if self.m.throughput and self.m.throughput.runs else None
        ss = self.m.single_stream.to_dict() if self.m.single_stream else None
        return tp, ss, key_metrics(tp, ss), key_noise(tp, ss)

    def _engine(self) -> str:
        return self.m.server.summary["engine"] if self.m.server else "unknown"

    def _compare(self) -> tuple[dict[str, Any], list[Check]]:
        """The key metrics measured so far against the group's reference (read now)."""
        _, _, km, kn = self._key_figures()
        group = GroupReference.read(self.o.baseline_path) if self.o.baseline_path else None
        return compare_baseline(group, self._engine(), self.c, km, kn)

    async def _confirm(self, mm: Measurer) -> None:
        """A regression must persist before it fails a host: measure the phase again, then judge.

        On one idle, healthy H100 (docs/real-sglang-h200.md) a whole gate's runs once sat 19 %
        under the group's reference, tightly, while the gates before and after were back at it:
        a dip of the machine (clocks, a neighbour), not of the host's software. A real
        regression (a wrong kernel, a smaller batch, a slower card) is there again
        ``confirm_wait_s`` later; a dip mostly is not. Only the phase whose metric failed is
        measured again, and the report keeps both measurements."""
        bc = self.c.baseline
        if not (bc.confirm and self.o.baseline_path):
            return
        _, checks = self._compare()
        failing = [c.name.removeprefix("baseline.") for c in checks if not c.passed and c.name != "baseline.reference"]
        if not failing:
            return
        again = ["single_stream"] if "single_stream_decode_tok_s" in failing else []
        if any(k != "single_stream_decode_tok_s" for k in failing):
            again.append("throughput")
        self.phase = "baseline confirmation"
        self.confirmation = {
            "wait_s": bc.confirm_wait_s,
            "failed_first": {c.name: c.message for c in checks if not c.passed},
            "remeasured": again,
        }
        self.say(
            f"{', '.join(failing)} below the group's reference; measuring {' and '.join(again)} again "
            f"in {bc.confirm_wait_s:g}s (a regression must persist: baseline.confirm)"
        )
        await asyncio.sleep(bc.confirm_wait_s)
        before = len(self.checks)
        if "single_stream" in again:
            self.m.first_single_stream = self.m.single_stream
            await self._single_stream(mm)
        if "throughput" in again and not self.down:
            self.m.first_throughput = self.m.throughput
            await self._throughput(mm)
        for c in self.checks[before:]:  # the second measurement's own checks, named apart from the first's
            head, _, rest = c.name.partition(".")
            c.name = f"{head}.confirmation.{rest}"
        await self._identity(mm, "after the baseline confirmation")

    def _answers_off(self) -> str:
        """Why the answers phase does not run ("" when it does)."""
        a = self.c.answers
        if not a.enabled:
            return "disabled in config"
        if not (a.probes or self._reference_wanted()):
            return "no probes in the config, and the reference answers need --baseline"
        return ""

    def _reference_wanted(self) -> bool:
        return self.c.answers.reference.enabled and self.o.baseline_path is not None

    def _group(self) -> GroupReference | None:
        """The group's reference as the answers phases see it (read once, before them)."""
        if self.group is None and self.o.baseline_path:
            self.group = GroupReference.read(self.o.baseline_path)
        return self.group

    async def _answers(self, mm: Measurer) -> None:
        assert self.m.server is not None
        if self.c.answers.probes:
            self.m.probes = await mm.probes(self.m.server.model)
            self._add(*judge.probes(self.m.probes, self.c))
            if any(p.request.failure == "timeout" for p in self.m.probes):
                self._stall("a probe did not finish")
        group = self._group()
        if not (self._reference_wanted() and group is not None) or self.down:
            return
        rc = self.c.answers.reference
        now = baseline_store.answer_settings(
            {"max_new_tokens": rc.max_new_tokens, "answers": [{"prompt": p} for p in reference_prompts()]}
        )
        stored, when, why = group.part(self._engine(), "answers", "reference answers", now)
        answers = [ScoredAnswer(**a) for a in stored["answers"]] if stored else None
        res = self.m.reference = await mm.reference(answers, when)
        res.not_compared = why
        self._add(judge.reference(res, self.c))
        if res.timed_out:
            self._stall(f"a reference answer did not come within answers.reference.timeout_s = {rc.timeout_s:g}s")

    async def _accuracy(self, mm: Measurer) -> None:
        res = self.m.accuracy = await mm.accuracy()
        group = self._group()
        if group is not None:
            stored, res.reference_from, res.not_compared = group.part(
                self._engine(), "accuracy", "accuracy", accuracy_settings(self.c.accuracy)
            )
            res.reference = stored
        g = judge.grade(res)
        self.say(
            f"accuracy: {g.correct} of {g.questions} right ({g.accuracy:.3f}), {g.invalid} invalid, "
            f"in {res.seconds:.1f}s"
        )
        self._add(*judge.accuracy(res, g, self.c, group is not None))
        if res.timed_out:
            self._stall(f"accuracy questions unanswered at the {res.deadline_s:g}s deadline")

    async def _single_stream(self, mm: Measurer) -> None:
        ss = self.m.single_stream = await mm.single_stream()
        self._add(*judge.single_stream(ss, self.c))
        self._health("single_stream", await mm.health("after the single stream"))
        if ss.request.failure == "timeout":
            self._stall(f"the single stream did not finish within {ss.timeout_s:g}s")

    async def _throughput(self, mm: Measurer) -> None:
        tp = self.m.throughput = await mm.throughput(self.m.file_limit, lambda runs: judge.spread_settled(runs, self.c))
        self._add(judge.warmups(tp), *judge.throughput(tp, self.c))
        if not tp.refused:
            self._health("throughput", await mm.health("after the throughput phase"))
        stalled = sum(r.stalled for r in tp.runs)
        if tp.timed_out:
            self._stall(f"{stalled} throughput requests still open at the {tp.deadline_s:g}s deadline")

    async def _stability(self, mm: Measurer) -> None:
        conc = self.c.stability.concurrency
        for idx, c in enumerate(conc, start=1):
            if self.down:
                self.m.stability.append(StabilityStep(idx, len(conc), c, 0, skipped=True))
                continue
            self.phase = f"stability step {idx}/{len(conc)}"
            st = await mm.stability_step(idx, len(conc), c, self.m.file_limit)
            self.m.stability.append(st)
            check = judge.stability_step(st, self.c)
            self.step_passed[idx] = check.passed
            self.checks.append(check)
            self.say(check.message)
            if st.health is not None:
                self.m.health.append(st.health)
                if not st.health.healthy and not self.down:
                    self.down = "the server was down or wedged"
            if st.load is not None and st.load.timed_out:
                self._stall(f"stability {st.label} hit its {st.load.deadline_s:g}s deadline")

    def _step_dict(self, st: StabilityStep) -> dict[str, Any]:
        """The step's measurements plus its verdict (the judge's check of that step)."""
        d = st.to_dict()
        if not st.skipped:
            d["passed"] = self.step_passed[st.step]
        return d

    # ----- bounded until the end -----

    def _stop(self, why: str, hard: bool) -> None:
        """Stop measuring (``hard``: a signal or the final deadline: stop whatever runs, go to the report)."""
        if not self.stopped:
            self.stopped = why
        if hard:
            self.interrupted = True
        if self._task is not None and not self._task.done() and (hard or self._measuring):
            self._task.cancel()

    @contextlib.asynccontextmanager
    async def guarded(self) -> AsyncIterator[None]:
        """SIGTERM/SIGINT and the final deadline stop the gate from here until the block ends (the
        report written): a signal never kills the gate before its report exists."""
        loop = asyncio.get_running_loop()
        d = self.c.deadline_s
        signals = [sig for sig in (signal.SIGTERM, signal.SIGINT) if _can_handle(loop, sig, self._stop)]
        timer = loop.call_at(loop.time() + self.remaining(), self._stop, f"the gate's deadline_s ({d:g}s) passed", True)
        try:
            yield
        finally:
            timer.cancel()
            for sig in signals:
                loop.remove_signal_handler(sig)

    async def _bounded(self, coro: Coroutine[Any, Any, T], measuring: bool = False) -> T | None:
        """Run ``coro`` until done, a stop, or (``measuring``) the measurement's own deadline; None when stopped."""
        if self.interrupted or (measuring and self.stopped):
            coro.close()
            return None
        self._measuring = measuring
        task = self._task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        d = self.c.deadline_s
        timer = (
            loop.call_at(
                loop.time() + self.remaining() - reserve_s(d),
                self._stop,
                f"the gate's deadline_s ({d:g}s) passed",
                False,
            )
            if measuring
            else None
        )
        try:
            return await task
        except asyncio.CancelledError:
            if not self.stopped:
                raise
            return None
        except Exception as exc:  # the gate's own bug outside a phase: still a report, never a traceback
            if not self.stopped:
                self.stopped = f"gate error {exc.__class__.__name__}: {exc}"[:300]
            return None
        finally:
            if timer is not None:
                timer.cancel()
            self._task = None
            self._measuring = False

    async def _logs(self, started: datetime) -> LogScanResult:
        deadline = self.t0 + self.c.deadline_s - 1.0  # a second for the judges and the report
        return await scan(self.o.logs, self.c, self.o.report_dir, started.isoformat(), self.offsets, deadline)

    def _earlier_starts(self, logs: LogScanResult | None) -> list[str]:
        """Starts before the gate: a log's earlier banners, a container Docker restarted before."""
        out = list(logs.earlier_starts) if logs else []
        first = self.m.identities[0].facts if self.m.identities else {}
        count = first.get("docker_restart_count")
        if isinstance(count, int) and count > 0:
            out.append(f"container {self._container()}: Docker restarted it {count} time(s) before the gate")
        return out

    async def run(self) -> dict[str, Any]:
        """Measure and judge; returns the report (the signal handlers are in place while it runs)."""
        async with self.guarded():
            return await self._run()

    async def run_then(self, finish: Callable[[dict[str, Any], float], T]) -> T:
        """Measure and judge, then ``finish(report, seconds left)`` (write it, record the baseline) with
        the signal handlers still in place: a SIGTERM then waits for the report instead of losing it."""
        async with self.guarded():
            report = await self._run()
            return finish(report, self.remaining())

    async def _run(self) -> dict[str, Any]:
        started = datetime.now(UTC)
        self.t0 = time.monotonic()
        self.offsets = _sizes(self.o.logs)
        self._open_files()
        await self._bounded(self._measure(), measuring=True)
        self._note_stop()
        self._add(judge.output(self.m.results))
        logs: LogScanResult | None = None
        if self.c.logs.enabled and self.o.logs:
            logs = await self._bounded(self._logs(started))
            if logs is None:
                err = f"the gate stopped before its logs were read ({self.stopped})"
                self._add(Check("logs.crash_signatures", False, None, 0, "matches", f"FAILED cannot read log: {err}"))
            else:
                self._add(judge.logs(logs))
            self._note_stop()  # a deadline or signal during the log fetch is a stop too
        elif self.c.logs.enabled:
            self.skipped.append(NO_LOG)
        self._add(judge.restarted(self.m.identities, logs.restarts if logs else [], self._earlier_starts(logs)))
        self._add(judge.health_latency(self.m.health, self.c.readiness.max_health_latency_s))
        return self._report(started, logs)

    def _note_stop(self) -> None:
        """The failed `gate.stopped` check, once, for a stop in measuring or in the log fetch."""
        if self.stopped and not any(c.name == "gate.stopped" for c in self.checks):
            text = f"FAILED stopped in phase {self.phase} because {self.stopped}; the report holds what was measured"
            self._add(Check("gate.stopped", False, self.phase, None, "", text))
            self.skipped.append(f"{self.phase}: stopped, {self.stopped}")

    def _report(self, started: datetime, logs: LogScanResult | None) -> dict[str, Any]:
        summary = self.m.server.summary if self.m.server else {"engine": "unknown", "source": "unavailable"}
        engine = summary["engine"]
        tp, ss, km, kn = self._key_figures()
        base_info, base_checks = self._compare()
        if self.confirmation is not None:
            for c in base_checks:
                first = self.confirmation["failed_first"].get(c.name)
                if first is not None:
                    verdict = "the regression persisted" if not c.passed else "it did not persist"
                    c.message += (
                        f"; measured again after {self.confirmation['wait_s']:g}s ({verdict}); the first "
                        f"measurement: {first.removeprefix('FAILED regression: ')}"
                    )
            base_info["confirmation"] = self.confirmation
        self._add(*base_checks)
        m = self.m
        grade = judge.grade(m.accuracy) if m.accuracy else None
        phases: dict[str, Any] = {
            "readiness": asdict(m.readiness) if m.readiness else None,
            "open_files": asdict(m.file_limit) if m.file_limit else None,
            "sampler_warmup": m.warmup.to_dict() if m.warmup else None,
            "identity": [asdict(i) for i in m.identities] or None,
            "probes": [
                {"probe": p.index, "prompt": p.prompt, "success": p.request.success, "answer": p.request.text[:2000]}
                for p in m.probes
            ]
            or None,
            "reference": m.reference.to_dict() if m.reference else None,
            "accuracy": {**m.accuracy.to_dict(), **grade.to_dict()} if m.accuracy and grade else None,
            "single_stream": ss,
            "throughput": tp or (m.throughput.to_dict() if m.throughput else None),
            "single_stream_first": m.first_single_stream.to_dict() if m.first_single_stream else None,
            "throughput_first": m.first_throughput.to_dict() if m.first_throughput else None,
            "stability": {"steps": [self._step_dict(s) for s in m.stability]} if m.stability else None,
            "health_checks": [asdict(h) for h in m.health],
            "logs": logs.to_dict() if logs else None,
            "server_info_raw": m.server.raw if m.server else None,
            "server_info_note": m.server.note if m.server else None,
        }
        accuracy = None
        if m.accuracy and grade:
            accuracy = {
                "settings": m.accuracy.settings,
                "questions": grade.questions,
                "correct": grade.correct,
                "invalid": grade.invalid,
                "accuracy": round(grade.accuracy, 4),
            }
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": f"sglang-gate {GATE_VERSION}",
            "verdict": judge.verdict(self.checks),
            "engine": engine,
            "engine_note": TEST_ENGINE_NOTE if engine == "test-engine" else "",
            "url": self.base,
            "started_at": started.isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - self.t0, 2),
            "stopped": {"phase": self.phase, "reason": self.stopped} if self.stopped else None,
            "labels": self.o.labels,
            "config_file": self.o.config_path,
            "config": self.c.model_dump(),
            "server_info": summary,
            "patch_record": self.o.patch_record,
            "checks": [asdict(c) for c in self.checks],
            "failed_checks": [c.name for c in self.checks if not c.passed],
            "skipped": self.skipped,
            "key_metrics": km,
            "key_noise": kn,
            # this gate's own answers and accuracy: stored when it becomes the group's reference
            "reference_answers": m.reference.recorded if m.reference and m.reference.recorded else None,
            "accuracy": accuracy,
            "baseline": base_info,
            "phases": {k: v for k, v in phases.items() if v is not None},
            "metric_definitions": METRIC_DEFINITIONS,
        }


def _can_handle(loop: asyncio.AbstractEventLoop, sig: signal.Signals, stop: Callable[[str, bool], None]) -> bool:
    """Install ``stop`` for ``sig`` (only possible in the main thread); whether it was installed."""
    try:
        loop.add_signal_handler(sig, stop, f"it received {sig.name}", True)
    except (ValueError, RuntimeError, NotImplementedError):
        return False
    return True


def _judged(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its failed checks and verdict judged again from its checks."""
    report["failed_checks"] = [c["name"] for c in report["checks"] if not c["passed"]]
    report["verdict"] = judge.verdict([Check(**c) for c in report["checks"]])
    return report


def rejudge_logs(report: dict[str, Any], config: GateConfig, logs: list[str], report_dir: str) -> dict[str, Any]:
    """Add the server's log of the gate window to a finished report and judge it again.

    The rollout fetches the container's log (``docker logs --since <gate start>``) after
    the gate, from a host the controller-side gate cannot read; the files the gate
    already scanned are scanned again (from the offsets they had at the gate's start) with
    them (window files: from their first byte), and the ``logs.crash_signatures`` check (and
    ``server.restarted`` when the window shows a start banner) and the verdict are replaced.
    """
    before = (report.get("phases") or {}).get("logs") or {}
    earlier = before.get("files") or []
    files = [f for f in earlier if Path(f).is_file()] + [f for f in logs if f not in earlier]
    offsets = {f: int(n) for f, n in (before.get("offsets") or {}).items() if f in files}
    res = asyncio.run(scan(files, config, report_dir, None, offsets))
    new = [judge.logs(res)]
    replaced = {"logs.crash_signatures"}
    if res.restarts:  # a start banner in the gate's window: the server restarted while it was gated
        new.append(judge.restarted([], res.restarts, res.earlier_starts))
        replaced.add("server.restarted")
    kept = [c for c in report.get("checks", []) if c.get("name") not in replaced]
    report["checks"] = [*kept, *(asdict(c) for c in new if c is not None)]
    report.setdefault("phases", {})["logs"] = res.to_dict()
    # the log is read now; a stop during the gate's own log fetch stays named, as its gate.stopped check does
    report["skipped"] = [s for s in report.get("skipped", []) if s != NO_LOG]
    return _judged(report)


def promote(report: dict[str, Any]) -> dict[str, Any]:
    """``--promote-baseline``: this gate replaces its group's reference on purpose, so the comparisons
    the old one could not make are accepted (checks.promoted); every other check stands."""
    report["checks"] = [asdict(judge.promoted(Check(**c))) for c in report.get("checks", [])]
    return _judged(report)
