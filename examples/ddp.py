"""DDP over gloo on one machine, compiled: the example of docs/processes.md.

    prov-trace run -o traces/ -m torch.distributed.run --standalone --nproc-per-node 2 examples/ddp.py
    prov-trace run -o div/ -m torch.distributed.run --standalone --nproc-per-node 2 examples/ddp.py diverge

With `diverge`, rank 1 takes a branch rank 0 does not, so the ranks compile different graphs and the
merged report says where they first differ.
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Tiny(torch.nn.Module):
    def __init__(self, extra):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.extra = extra

    def forward(self, x):
        x = self.fc(x)
        if self.extra:  # only on the rank that diverges
            x = torch.sigmoid(x) * 2
        return torch.relu(x)


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(Tiny(len(sys.argv) > 1 and sys.argv[1] == "diverge" and rank == 1))
out = torch.compile(model)(torch.randn(4, 8))
out.sum().backward()
print(f"rank {rank} done {tuple(out.shape)}", flush=True)  # one write: the ranks share stdout
dist.destroy_process_group()
