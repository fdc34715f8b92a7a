"""A Hugging Face BERT (2 layers) built from a config with random weights: nothing is downloaded.

Needs `transformers` (an example/test dependency only: `pip install transformers`).

    prov-trace run examples/bert_tiny.py:build --report bert.html
"""

import torch


def build():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                        vocab_size=1000, max_position_embeddings=64)
    return BertModel(config)


def example_inputs():
    return (torch.randint(0, 1000, (2, 16)),)
