"""The reference MLP compiled once and run once, as a user's compile script would: the whole-process benchmark's input."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from reference_mlp import SimpleMLP  # noqa: E402

torch.manual_seed(0)
model = SimpleMLP().eval()
with torch.no_grad():
    out = torch.compile(model)(torch.randn(2, 128))
print("output", tuple(out.shape))
