"""Models for the Spyre-on-the-CPU tests (tests/test_spyre_cpu.py), one statement per line in forward.

GraphBreakFused has a graph break (the print) and, after it, a matmul whose transposed
operand is made on its own line: Inductor folds the transpose into the matmul's buffer, so
that one Spyre op comes from two source lines and its DebugHandle lists both in fused_from.
"""

import torch
from torch import nn


class GraphBreakFused(nn.Module):
    def __init__(self, d_in: int = 64, d_hidden: int = 128, d_out: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.proj = nn.Parameter(torch.randn(d_out, d_hidden) * 0.02)

    def forward(self, x):
        x = self.fc1(x)
        x = torch.relu(x)
        print("graph break: Dynamo cannot put print() in a graph")
        w = self.proj.t()
        x = x @ w
        x = x * 2.0
        return x


def example_inputs():
    return (torch.randn(4, 64),)


class Scale(nn.Module):
    """The smallest model worth compiling: one pointwise kernel (mul, then add)."""

    def __init__(self, d: int = 64):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return x * 2.0 + self.bias


class CpuFallback(nn.Module):
    """A matmul torch-spyre compiles, then a cumsum it has no kernel for: it falls back to the CPU."""

    def __init__(self, d: int = 64):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        h = self.fc(x)
        return torch.cumsum(h, dim=-1)
