"""A Hugging Face GPT-2 built from a small config with random weights: nothing is downloaded.

Needs `transformers` (an example/test dependency only: `pip install transformers`).

    prov-trace run examples/gpt2_tiny.py:build
"""

import torch


def build():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def example_inputs():
    return (torch.randint(0, 1000, (2, 16)),)
