"""A script whose model breaks its graph and then recompiles for a second input shape.

    prov-trace run examples/recompile.py

The `print` in GraphBreakMLP.forward splits it into two graphs (compile ids 0/0
and 1/0); calling it again with another batch size recompiles both (0/1, 1/1).
The report shows each graph with its compile id and its own stage columns.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_break import GraphBreakMLP  # noqa: E402


def main() -> None:
    torch.manual_seed(0)
    model = GraphBreakMLP().eval()
    compiled = torch.compile(model)
    with torch.no_grad():
        for batch in (4, 8):
            out = compiled(torch.randn(batch, 64))
            print(f"batch {batch}: output {tuple(out.shape)}")


if __name__ == "__main__":
    main()
