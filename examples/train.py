"""An ordinary training script: a few optimizer steps over torch.compile(model).

It knows nothing of prov-trace. Trace every compile it makes, unmodified:

    prov-trace run examples/train.py --steps 3
"""

import argparse

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        h = self.fc1(x)
        h = torch.nn.functional.gelu(h)
        return self.fc2(h)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--compile-optimizer", action="store_true", help="also compile the optimizer step")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(opt.step) if args.compile_optimizer else opt.step
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    for i in range(args.steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        step()
        print(f"step {i}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
