"""Event backends: ``monitoring`` (3.12+), ``inject`` (3.11-3.13), ``settrace`` (any Python).

Each module holds one backend; ``tracer/core.py`` picks one and says why.
"""
