"""What counts as an answer: the text rules every measured request goes through.

A broken NVFP4 GEMM or attention kernel, or NaN logits that SGLang >= 0.5.17 silently
sanitizes before sampling, look the same from outside: the server streams at full speed,
finishes with ``length`` and says nothing, but every answer is one token over and over
("!!!!...", token id 0). A gate that only measures speed passes that server. So each
request's answer is judged here, in every phase, and a degenerate answer is a failed
request (reason ``degenerate``), counted like an abort.

The rule, calibrated on what a real SGLang 0.5.17 server answered (a random-weight 0.9 B
Llama on an H200, docs/gate-sglang-facts.md: 54-63 distinct tokens of 64,
no token more than 3 times in a row; the recorded transcripts in tests/fixtures): an
answer of at least ``answers.min_tokens`` tokens is degenerate when

* it has no text at all, or more than half of its characters are U+FFFD (not decodable);
* one token id (``/generate`` streams the ids) repeats back to back over more than
  ``answers.max_repeat_fraction`` of the answer;
* without ids (the OpenAI routes stream text pieces): one piece, or one non-blank
  character, repeats back to back over more than that share.

Honest text has runs of 1-3; a broken kernel gives one run over the whole answer. The
defaults (16 tokens, half the answer) leave a wide margin on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class AnswerRule:
    """The two numbers of the rule (``answers.min_tokens``, ``answers.max_repeat_fraction``)."""

    min_tokens: int = 16
    max_repeat_fraction: float = 0.5


def longest_run(items: Sequence[Any]) -> tuple[int, Any]:
    """(length, item) of the longest back-to-back repetition in ``items``; (0, None) when empty."""
    best, best_item, run = 0, None, 0
    for i, item in enumerate(items):
        run = run + 1 if i and item == items[i - 1] else 1
        if run > best:
            best, best_item = run, item
    return best, best_item


def _show(text: str) -> str:
    return repr(text[:24] + ("..." if len(text) > 24 else ""))


def degenerate(
    rule: AnswerRule, tokens: int, text: str, ids: Sequence[int] | None = None, pieces: Sequence[str] | None = None
) -> str:
    """Why this answer is degenerate, or "" when it is an answer.

    ``tokens``: how many tokens were streamed; ``ids``: the token ids when the route streams
    them; ``pieces``: the streamed text pieces (OpenAI routes).
    """
    if tokens < rule.min_tokens:
        return ""  # too short to tell a loop from an answer
    if not text.strip():
        return f"{tokens} tokens but no text"
    bad = text.count(REPLACEMENT)
    if bad * 2 > len(text):
        return f"not decodable: {bad} of {len(text)} characters are U+FFFD"
    limit = rule.max_repeat_fraction
    if ids:
        run, tok = longest_run(ids)
        if run > limit * len(ids):
            return f"token id {tok} repeated {run} times in a row ({run} of {len(ids)} tokens): {_show(text)}"
        return ""
    if pieces and len(pieces) >= rule.min_tokens:
        run, piece = longest_run(pieces)
        if run > limit * len(pieces):
            return f"the piece {piece!r} repeated {run} times in a row ({run} of {len(pieces)} pieces)"
    chars = "".join(text.split())
    run, ch = longest_run(chars)
    if len(chars) >= rule.min_tokens and run > limit * len(chars):
        return f"the character {ch!r} repeated {run} times in a row ({run} of {len(chars)} characters): {_show(text)}"
    return ""


# ----- the group's reference answers -----
#
# A server can stream fluent, varied text and still compute the wrong thing (a quantized
# GEMM off by a scale, a wrong attention backend, another checkpoint). The reference check
# compares what the model *believes*: the first passing gate of a host group answers a
# fixed prompt set greedily and scores its own answers (per-token log-probabilities with
# teacher forcing: SGLang's ``return_logprob`` with ``logprob_start_len``, one prefill
# each); those answers are stored with the group's baseline. Every later gate of the
# group scores the same token ids on its server: the same weights and kernels give the
# same log-likelihood to within numerical noise, other weights or a broken kernel do not.
# Both sides are scored on the same path (prefill), never decode against prefill.

REFERENCE_PROMPTS = Path(__file__).with_name("data") / "reference_prompts.yml"


def reference_prompts() -> list[str]:
    data = yaml.safe_load(REFERENCE_PROMPTS.read_text(encoding="utf-8"))
    assert isinstance(data, list) and all(isinstance(p, str) and p for p in data), REFERENCE_PROMPTS
    return data


@dataclass
class ScoredAnswer:
    prompt: str
    prompt_ids: list[int]
    answer_ids: list[int]
    logprobs: list[float]

    @property
    def mean(self) -> float:
        return sum(self.logprobs) / len(self.logprobs) if self.logprobs else 0.0


@dataclass
class ReferenceResult:
    """What the reference phase found: recorded answers (first gate) or a comparison."""

    mode: str  # "recorded" | "compared" | "error"
    error: str = ""
    recorded: dict[str, Any] | None = None  # stored with the baseline when this gate passes
    deltas: list[float] = field(default_factory=list)  # |mean log-likelihood now - reference|, per answer
    divergence: list[int | None] = field(default_factory=list)  # first token where the greedy answer differs
    reference_from: str = ""

    @property
    def worst(self) -> float:
        return max(self.deltas) if self.deltas else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "error": self.error,
            "answers": len((self.recorded or {}).get("answers", [])) or len(self.deltas),
            "deltas": [round(d, 4) for d in self.deltas],
            "worst_delta": round(self.worst, 4),
            "first_divergence": self.divergence,
            "reference_from": self.reference_from,
        }


class ReferenceError_(Exception):
    """The server could not answer the reference requests (no log-probabilities, an error)."""


async def _post_json(mm: Any, body: dict[str, Any]) -> dict[str, Any]:
    to = mm.c.answers.reference.timeout_s
    try:
        async with mm.s.post(
            mm.base + "/generate",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=to),
        ) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise ReferenceError_(f"HTTP {resp.status}: {text[:200]}")
            data = json.loads(text)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        raise ReferenceError_(f"{exc.__class__.__name__}: {exc}"[:300]) from None
    if not isinstance(data, dict) or not isinstance(data.get("meta_info"), dict):
        raise ReferenceError_(f"not a /generate answer: {str(data)[:200]}")
    return data


def _logprob_entries(meta: dict[str, Any], key: str) -> list[tuple[float | None, int]]:
    entries = meta.get(key)
    if not isinstance(entries, list):
        raise ReferenceError_(f"the server returned no {key} (return_logprob unsupported?)")
    out = []
    for e in entries:
        if not isinstance(e, list | tuple) or len(e) < 2:
            raise ReferenceError_(f"{key}: unexpected entry {e!r}"[:200])
        out.append((None if e[0] is None else float(e[0]), int(e[1])))
    return out


async def greedy_answer(mm: Any, prompt: str, max_new: int) -> tuple[list[int], list[int]]:
    """(prompt ids, greedy answer ids): the prompt's ids come back as input_token_logprobs' ids."""
    body = {
        "text": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    data = await _post_json(mm, body)
    prompt_ids = [t for _, t in _logprob_entries(data["meta_info"], "input_token_logprobs")]
    answer = data.get("output_ids")
    if not isinstance(answer, list) or not answer:
        raise ReferenceError_("the greedy answer has no output_ids")
    return prompt_ids, [int(t) for t in answer]


async def score(mm: Any, prompt_ids: list[int], answer_ids: list[int]) -> list[float]:
    """Teacher forcing: the log-probability of each answer token after the prompt and the answer before it."""
    body = {
        "input_ids": prompt_ids + answer_ids,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 1},
        "return_logprob": True,
        "logprob_start_len": max(0, len(prompt_ids) - 1),
    }
    data = await _post_json(mm, body)
    entries = _logprob_entries(data["meta_info"], "input_token_logprobs")
    tail = entries[-len(answer_ids) :]
    if len(tail) != len(answer_ids) or [t for _, t in tail] != answer_ids or any(lp is None for lp, _ in tail):
        raise ReferenceError_(
            f"input_token_logprobs do not line up with the {len(answer_ids)} answer tokens (got {len(entries)} entries)"
        )
    return [float(lp) for lp, _ in tail if lp is not None]


async def reference_phase(mm: Any, baseline_path: str | None) -> ReferenceResult:
    """Record the reference answers (no reference yet) or score the stored ones on this server."""
    from . import baseline as baseline_store

    rc = mm.c.answers.reference
    stored = None
    ref_from = ""
    try:
        ref_file = baseline_store.load(baseline_path) if baseline_path else None
    except baseline_store.BaselineError:
        ref_file = None  # the baseline comparison reports a malformed file itself
    if ref_file is not None and ref_file.reference.answers:
        stored = ref_file.reference.answers
        ref_from = ref_file.reference.started_at
    try:
        if stored is None or stored.get("max_new_tokens") != rc.max_new_tokens:
            mm.say(f"reference answers: recording {len(reference_prompts())} greedy answers (first gate of the group)")
            answers = []
            for prompt in reference_prompts():
                pids, aids = await greedy_answer(mm, prompt, rc.max_new_tokens)
                lps = await score(mm, pids, aids)
                answers.append(asdict(ScoredAnswer(prompt, pids, aids, lps)))
            recorded = {"max_new_tokens": rc.max_new_tokens, "answers": answers}
            return ReferenceResult("recorded", recorded=recorded)
        res = ReferenceResult("compared", reference_from=ref_from)
        mm.say(f"reference answers: scoring the group's {len(stored['answers'])} answers on this server")
        for a in stored["answers"]:
            ref = ScoredAnswer(**a)
            now = await score(mm, ref.prompt_ids, ref.answer_ids)
            res.deltas.append(abs(sum(now) / len(now) - ref.mean))
            _, greedy = await greedy_answer(mm, ref.prompt, rc.max_new_tokens)
            res.divergence.append(
                next((i for i, (x, y) in enumerate(zip(greedy, ref.answer_ids, strict=False)) if x != y), None)
            )
        return res
    except ReferenceError_ as exc:
        return ReferenceResult("error", error=str(exc), reference_from=ref_from)
