"""A tiny random-weight Qwen2 model plus tokenizer, built offline, for vLLM on CPU.

    python -m benchmarks.tiny_model FOLDER

Tests and `benchmarks.vllm_gpu --tiny` need a real Hugging Face model folder that vLLM loads
like any other, without a network or a download: a 2-layer Qwen2 (hidden 64, 2 heads, so
head_dim 32), random weights, and a byte-level BPE tokenizer trained on a few lines, with a
ChatML chat template saved beside it.
Its replies are random tokens, so tests assert structure (token counts, repeatability), never
text. Needs torch, transformers and tokenizers (all pulled in by vLLM).
"""

from __future__ import annotations

import sys
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
# ChatML, as Qwen2's own template writes it: every prompt of a task shares a long prefix.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "you are an expert data scientist write python code",
    "train a model on the data and predict the target column",
    "import pandas as pd import numpy as np from sklearn import linear_model",
    "def fit_predict ( X , y , X_valid , X_test ) : return model . predict ( X_valid )",
    "the metric is rmse lower is better improve the best solution fix the bug",
    "system user assistant plan code reply python ``` = + - * / , . : ( ) [ ] { }",
]
VOCAB_SIZE = 512  # the model's embedding rows; the tokenizer may learn fewer merges


def build_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Write the model and tokenizer into `folder` (created) and return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    # Byte-level BPE, as Qwen2's own tokenizer: transformers loads a qwen2 folder's tokenizer
    # as Qwen2Tokenizer (byte-level pre-tokenizer), so a word-level one would be rebuilt wrong.
    # The full vocabulary is filled, so every id the model emits decodes to text.
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=1, show_progress=False)
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<|im_end|>",
        pad_token="<|endoftext|>", bos_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32768,
        tie_word_embeddings=True, torch_dtype="float32",
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        bos_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return folder


if __name__ == "__main__":
    print(build_tiny_model(Path(sys.argv[1])))
