"""JSON Schemas of the JSON / YAML files edgetune reads, and the one way they are checked.

Each schema (``<name>.schema.json`` beside this module, documented in ``docs/formats.md``)
says which keys a file may have, which are required and of what type. :func:`check` runs a
decoded document against one and turns the first problem into an
:class:`~edgetune.errors.InvalidArgument` naming the key path (``fleet.json:nodes[0].samples``)
and what is allowed: an unknown or misspelt key is an error that names it and lists the keys
that are allowed there. Semantic checks (finite numbers, files that exist, duplicates) stay
with the reader of each file.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from edgetune.errors import InvalidArgument

#: The schemas shipped with the package, by name.
NAMES = ("fleet", "job")


@cache
def schema(name: str) -> dict[str, Any]:
    """The decoded ``<name>.schema.json``."""
    if name not in NAMES:
        raise InvalidArgument("schema", f"unknown schema {name!r}", ", ".join(NAMES))
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def _path(source: str, parts: Any) -> str:
    out = source
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += (":" if i == 0 else ".") + str(part)
    return out


def _subschema(root: dict[str, Any], schema_path: Any) -> dict[str, Any]:
    """The schema object holding the failing keyword (the error's ``schema_path`` minus its last part)."""
    node: Any = root
    for part in list(schema_path)[:-1]:
        if part == "$ref":  # "#/$defs/name": follow it from the root
            target: Any = root
            for step in str(node["$ref"]).removeprefix("#/").split("/"):
                target = target[step]
            node = target
        else:
            node = node[part]
    return node if isinstance(node, dict) else {}


def check(doc: Any, name: str, source: str) -> None:
    """Raise InvalidArgument for the first place where ``doc`` breaks schema ``name``; ``source`` names
    the file in the error (``fleet.json``)."""
    from jsonschema import Draft202012Validator  # ~50 ms to import: only when a file is read

    root = schema(name)
    errors = sorted(Draft202012Validator(root).iter_errors(doc), key=lambda e: (len(e.path), list(e.path)))
    if not errors:
        return
    err = errors[0]
    where = _path(source, err.path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = sorted(_subschema(root, err.schema_path).get("properties", {}))
        unknown = sorted(set(err.instance) - set(allowed))
        if allowed and unknown:
            raise InvalidArgument(_path(source, [*err.path, unknown[0]]), f"unknown key {unknown[0]!r}",
                                  ", ".join(allowed))
    if err.validator == "required":
        missing = str(err.message).split("'")[1] if "'" in str(err.message) else str(err.message)
        raise InvalidArgument(_path(source, [*err.path, missing]), "is missing", "a required key")
    described = err.schema.get("description") if isinstance(err.schema, dict) else None
    raise InvalidArgument(where, str(err.message)[:300], described if described and len(described) < 120 else None)
