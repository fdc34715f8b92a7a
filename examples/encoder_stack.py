"""A larger model: 24 nn.TransformerEncoderLayer (d_model 256, 4 heads), in inference.

In eval under no_grad, nn.TransformerEncoderLayer takes a fused fast path that
is one opaque `aten._transformer_encoder_layer_fwd` node per layer; building
the stack turns that off (`torch.backends.mha.set_fastpath_enabled(False)`) so
the compile lowers ordinary ops: about 1,750 post-grad nodes, a real graph.

    prov-trace run examples/encoder_stack.py:EncoderStack
"""

import torch
from torch import nn

D_MODEL = 256
N_HEAD = 4
N_LAYERS = 24


class EncoderStack(nn.Module):
    def __init__(self, n_layers: int = N_LAYERS, d_model: int = D_MODEL, nhead: int = N_HEAD):
        super().__init__()
        torch.backends.mha.set_fastpath_enabled(False)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True)
            for _ in range(n_layers)
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def example_inputs():
    return (torch.randn(2, 16, D_MODEL),)
