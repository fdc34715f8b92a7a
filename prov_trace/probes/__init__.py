"""Probes: pure functions from live compile-path objects to plain data, and the profiles that place them."""

from prov_trace.contract import Hook, ProbeCall, Profile

__all__ = ["Hook", "ProbeCall", "Profile"]
