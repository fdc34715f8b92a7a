"""The model under audit: a two-layer MLP, one statement per line in forward.

`prov-trace run examples/reference_mlp.py:SimpleMLP` compiles it once on the CPU
and writes the provenance report. Each line of `forward` is its own row in the
report's survival table.
"""

import torch
from torch import nn


class SimpleMLP(nn.Module):
    def __init__(self, d_in: int = 128, d_hidden: int = 256, d_out: int = 128):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        x = self.fc1(x)
        x = torch.relu(x)
        x = self.fc2(x)
        return x
