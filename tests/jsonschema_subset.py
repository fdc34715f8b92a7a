"""A validator for the subset of JSON Schema (2020-12) that docs/report.schema.json uses.

Small on purpose, so the test needs no extra dependency. It refuses a schema
that uses any keyword outside the subset, so the schema can't silently grow
past what is checked.
"""

from __future__ import annotations

from typing import Any

ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}
KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "minimum", "$ref"}

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaError(Exception):
    pass


def check_schema(schema: Any, path: str = "#") -> None:
    """Every keyword is in the subset this validator checks."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"{path}: a schema must be an object or a boolean")
    for k, v in schema.items():
        if k not in KEYWORDS | ANNOTATIONS:
            raise SchemaError(f"{path}: keyword {k!r} is outside the supported subset")
        if k in ("properties", "$defs"):
            for name, sub in v.items():
                check_schema(sub, f"{path}/{k}/{name}")
        elif k in ("items", "additionalProperties"):
            check_schema(v, f"{path}/{k}")
        elif k == "type":
            for t in (v if isinstance(v, list) else [v]):
                if t not in _TYPES:
                    raise SchemaError(f"{path}: unknown type {t!r}")


def validate(instance: Any, schema: Any, root: Any = None, path: str = "$") -> list[str]:
    """The list of errors, empty when the instance is valid."""
    root = schema if root is None else root
    if schema is True:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    errors: list[str] = []
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return [f"{path}: only local $ref are supported, not {ref}"]
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        errors += validate(instance, target, root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](instance) for t in types):
            return errors + [f"{path}: {type(instance).__name__} is not of type {'/'.join(types)}"]
    if "const" in schema and instance != schema["const"]:
        errors.append(f"{path}: {instance!r} is not {schema['const']!r}")
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{path}: {instance!r} is not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](instance) and instance < schema["minimum"]:
        errors.append(f"{path}: {instance} is below {schema['minimum']}")
    if isinstance(instance, dict):
        for k in schema.get("required", []):
            if k not in instance:
                errors.append(f"{path}: missing required key {k!r}")
        props = schema.get("properties", {})
        for k, v in instance.items():
            if k in props:
                errors += validate(v, props[k], root, f"{path}.{k}")
            elif "additionalProperties" in schema:
                errors += validate(v, schema["additionalProperties"], root, f"{path}.{k}")
    if isinstance(instance, list) and "items" in schema:
        for i, v in enumerate(instance):
            errors += validate(v, schema["items"], root, f"{path}[{i}]")
    return errors
