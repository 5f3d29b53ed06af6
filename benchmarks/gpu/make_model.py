"""Build a tokenizer and a random-weight Llama that real SGLang can serve, without any download.

The lent GPU machine has no network, so no checkpoint can be fetched. A byte-level BPE tokenizer
trained on local text (Python's own sources) and a ``LlamaForCausalLM`` with random weights,
saved with ``save_pretrained``, give a real server: real kernels, real scheduler, real HTTP,
real logs. Its text is noise; its shapes, timings and failures are SGLang's. The default size
(hidden 2048, 16 layers, GQA 16/8, vocabulary 32,000) is about 0.9 B parameters, 1.8 GB in bf16:
on one H200 its server is bound by the VM's CPU, not the GPU (docs/real-sglang-h200.md), so run
to run it varies more than a 20 % regression. ``--size 8b`` is Llama-3-8B's shape (hidden 4096,
32 layers, GQA 32/8, MLP 14336; 7.5 B parameters with this vocabulary, 15 GB in bf16): each
decode step reads 15 GB of weights and a 256 x 256 prefill is about a PFLOP, so the GPU sets
the pace, as on a GLM-5 host.

A chat template is set so ``/v1/chat/completions`` works like on a real chat model.

Usage: python make_model.py OUT_DIR [--size {tiny,0.9b,8b}] [--seed N --tokenizer-from DIR]
(--size tiny: a few MB, for a CPU check of this script; --seed with --tokenizer-from: the same shape and
token ids with other weights, the model the reference-answers check must fail)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import sysconfig
import time
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]


def corpus(limit_bytes: int) -> list[str]:
    """Text to train the tokenizer on: the standard library's sources (present everywhere)."""
    texts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(text)
        size += len(text)
        if size >= limit_bytes:
            break
    return texts


def build_tokenizer(out: Path, vocab_size: int, corpus_bytes: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(corpus_bytes), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
    "0.9b": dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8
    ),
    "8b": dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8
    ),
}


def build_model(out: Path, vocab_size: int, size_name: str, seed: int = 0) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    size = SIZES[size_name]
    config = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
        **size,
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(seed)
    if size_name == "8b":  # built in bf16 directly (fp32 first would need 30 GB); the others as they were recorded
        torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", choices=sorted(SIZES), default="0.9b")
    parser.add_argument("--tiny", action="store_true", help="the same as --size tiny")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (another seed: other weights)")
    parser.add_argument(
        "--tokenizer-from", type=Path, help="copy this model's tokenizer (same token ids) instead of training one"
    )
    args = parser.parse_args(argv)
    if args.tiny:
        args.size = "tiny"
    if (args.out / "config.json").exists() and (args.out / "tokenizer.json").exists():
        print(f"model already at {args.out}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    vocab = 1000 if args.size == "tiny" else 32000
    start = time.monotonic()
    if args.tokenizer_from:
        for f in args.tokenizer_from.iterdir():
            if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
                shutil.copy(f, args.out / f.name)
    else:
        build_tokenizer(args.out, vocab, 2_000_000 if args.size == "tiny" else 20_000_000)
    t_tok = time.monotonic() - start
    params = build_model(args.out, vocab, args.size, args.seed)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(
        json.dumps(
            {
                "out": str(args.out),
                "parameters": params,
                "bytes": size,
                "tokenizer_s": round(t_tok, 1),
                "total_s": round(time.monotonic() - start, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
