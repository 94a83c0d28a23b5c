# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a tiny random Llama with a locally trained byte-level BPE tokenizer.

It stands in for the served model in the simulated cluster: the real engine
loads and serves it on CPU in seconds. Shapes are chosen for vLLM's CPU
attention backend, which supports head_dim 32 (128 hidden / 4 heads) but not 16.
Everything is seeded and trained on a fixed corpus, so the same runtime
writes the same bytes every time.

Usage: python3 make_tiny_model.py OUTPUT_DIR   (run with the vLLM runtime on PYTHONPATH)
"""

import json
import pathlib
import sys

SEED = 1234
VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}: {{ message['content'] }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def corpus():
    """A fixed, varied English-ish corpus: enough merges for a 1024 vocabulary."""
    words = (  # noqa: SIM905  # the corpus reads as text, not as a list of words
        "the quick brown fox jumps over lazy dog spark node cluster tensor parallel "
        "fabric link model token engine serve health ready rank head worker memory "
        "cache prefix request answer number one two three four five six seven eight "
        "nine ten hello world what is capital of france paris berlin rome madrid "
        "network address port gateway switch cable copper fiber light signal"
    ).split()
    lines = []
    for i in range(4000):
        # A linear congruential walk through the word list: varied, reproducible.
        n = 5 + (i * 7) % 11
        lines.append(" ".join(words[(i * 31 + k * 17 + (i * k) % 13) % len(words)] for k in range(n)))
        lines.append(f"{i} + {i % 97} = {i + i % 97}.")
    return lines


def build_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=256,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(out, tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.generation_config.do_sample = False
    model.save_pretrained(out, safe_serialization=True)


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = pathlib.Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out)
    build_model(out, tokenizer)
    files = sorted(p.name for p in out.iterdir())
    print(json.dumps({"model": str(out), "vocab": len(tokenizer), "files": files}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
