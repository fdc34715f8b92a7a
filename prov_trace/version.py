"""prov-trace's version: one place, read by the package, the stream header and ``--version``."""

VERSION = "0.1.0"
