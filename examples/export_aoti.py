"""Deploy the reference MLP the ahead-of-time way: torch.export, then AOTInductor into a .pt2 package.

    prov-trace run examples/export_aoti.py

No torch.compile here: the report's Source stage is the module's forward that torch.export traced,
its Export graph is the ExportedProgram's graph, and its Artifact is the C++ AOTInductor wrote (the
wrapper and kernel sources inside the package), scanned for provenance comments. The package goes to
the path given as the first argument, else to a new temporary directory; its path is printed.
"""

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_mlp import SimpleMLP  # noqa: E402


def main(package_path: str | None = None) -> str:
    torch.manual_seed(0)
    model = SimpleMLP().eval()
    example = (torch.randn(2, 128),)
    exported = torch.export.export(model, example)
    path = package_path or os.path.join(tempfile.mkdtemp(prefix="export_aoti-"), "mlp.pt2")
    path = torch._inductor.aoti_compile_and_package(exported, package_path=path)
    print(f"packaged: {path}")
    return path


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
