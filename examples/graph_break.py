"""A model whose forward has a graph break: Dynamo compiles it as two graphs.

`print(...)` cannot be traced into an FX graph, so Dynamo splits `forward` at
that line: the first graph holds fc1 and relu, the second fc2 and the scaling.
`prov-trace run examples/graph_break.py:GraphBreakMLP` reports each graph (0/0, 1/0)
with its own matrix, survival rows and lineage; the print reads "graph break".
"""

import torch
from torch import nn


class GraphBreakMLP(nn.Module):
    def __init__(self, d_in: int = 64, d_hidden: int = 128, d_out: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        x = self.fc1(x)
        x = torch.relu(x)
        print("graph break: Dynamo cannot put print() in a graph")
        x = self.fc2(x)
        x = x * 2.0
        return x


def example_inputs():
    return (torch.randn(4, 64),)
