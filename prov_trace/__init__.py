"""prov-trace: where source provenance survives, and where it is dropped, in torch.compile."""

__version__ = "0.1.0"
