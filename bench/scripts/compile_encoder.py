"""The 24-layer transformer encoder compiled once and run once: the whole-process benchmark's large input."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from encoder_stack import EncoderStack, example_inputs  # noqa: E402

torch.manual_seed(0)
model = EncoderStack().eval()
with torch.no_grad():
    out = torch.compile(model)(*example_inputs())
print("output", tuple(out.shape))
