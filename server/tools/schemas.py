"""A tool's schemas as JCT lists them: every character of tools/list lands in each agent's context window, so
the SDK's auto-generated schemas are trimmed of what carries nothing, and the output schema is made cheap to
check and portable to every client. `trim` does it to a tool once, as it is declared (declare.py)."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver.tools import Tool

from server import sdk


def trim(tool: Tool) -> None:
    """Drop the auto-generated "title" keys (they only repeat the property names), compact the input schema, and
    publish the output schema flattened and portable."""
    _strip_titles(tool.parameters)
    tool.parameters = _shorter(_compact_input_schema(tool.parameters))
    schema = sdk.output_schema(tool)
    if schema is not None:
        sdk.set_output_schema(tool, _portable(_flat_output_schema(schema)))


# Defaults that say nothing a model does not assume of a parameter it may leave out.
_EMPTY_DEFAULTS: tuple[Any, ...] = (None, "", [], {})


def _compact_input_schema(schema: Any) -> Any:
    """The same input schema in fewer characters (each lands in every agent's context window): an optional
    parameter, anyOf [X, null], becomes plain X (leaving it out is how a caller says null; a null sent anyway
    is still accepted), a default that is merely empty (null, "", [], {}) is left out, as leaving the
    parameter out means the same, and so is `additionalProperties` (true is what JSON Schema assumes; false, on
    a nested model, is what pydantic enforces on the server, which names the unknown key in its error)."""
    if isinstance(schema, list):
        return [_compact_input_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    node = {key: _compact_input_schema(value) for key, value in schema.items()}
    if isinstance(node.get("additionalProperties"), bool):
        del node["additionalProperties"]
    if "default" in node and any(
        node["default"] == empty and type(node["default"]) is type(empty) for empty in _EMPTY_DEFAULTS
    ):
        del node["default"]
    options = node.get("anyOf")
    if isinstance(options, list) and len(options) > 2 and {"type": "null"} in options:
        # anyOf [X, Y, null]: leaving the parameter out is how a caller says null.
        node["anyOf"] = [option for option in options if option != {"type": "null"}]
    merged = _nullable(node)
    if merged is None:
        return node
    merged["type"] = merged["type"][0]
    if isinstance(merged.get("enum"), list):
        merged["enum"] = [value for value in merged["enum"] if value is not None]
    return merged


# Keywords that constrain only objects, arrays, strings or numbers, so a null passes them anyway.
_NULL_PASSES = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "format",
        "title",
        "description",
        "default",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "minimum",
        "maximum",
    }
)


def _nullable(node: dict[str, Any]) -> dict[str, Any] | None:
    """anyOf [X, null] as X with type [X's type, "null"] (and null among X's enum), or None when X says more
    than a null would pass."""
    options = node.get("anyOf")
    if not (isinstance(options, list) and len(options) == 2 and {"type": "null"} in options):
        return None
    other = options[0] if options[1] == {"type": "null"} else options[1]
    if not (isinstance(other, dict) and isinstance(other.get("type"), str) and set(other) - {"enum"} <= _NULL_PASSES):
        return None
    merged = {**other, **{key: value for key, value in node.items() if key != "anyOf"}, "type": [other["type"], "null"]}
    if isinstance(merged.get("enum"), list):
        merged["enum"] = [*merged["enum"], None]
    return merged


def _shorter(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema with its $defs inlined when that is shorter (a model used once, as most are)."""
    flat = _flat_output_schema(schema)
    return flat if len(json.dumps(flat)) < len(json.dumps(schema)) else schema


def _flat_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The same results, described for cheap checking: the SDK client validates every call's
    structuredContent against the output schema with jsonschema, whose cost grows with each
    $ref it resolves and each anyOf it tries. So $defs are inlined, and a nullable field,
    anyOf [X, null], is written as X with type [X's type, "null"]."""
    definitions = schema.get("$defs", {})

    def flat(node: Any, depth: int = 0) -> Any:
        if isinstance(node, list):
            return [flat(item, depth) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1 and depth < 10:
            return flat(definitions[ref.removeprefix("#/$defs/")], depth + 1)
        out = {key: flat(value, depth) for key, value in node.items() if key != "$defs"}
        return _nullable(out) or out

    flattened: dict[str, Any] = flat(schema)
    if '"$ref"' in json.dumps(flattened):
        return schema  # a recursive model: keep the schema as the SDK built it
    return flattened


def _portable(schema: Any) -> Any:
    """An output schema every client can map (the MCP Inspector's `--strict` portability check passes): no
    `type` arrays and no null branches. Results leave a null field out (results.Shape), so a nullable field
    is an optional one of its single type: ["string", "null"] becomes "string", no longer required."""
    if isinstance(schema, list):
        return [_portable(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    node = {key: _portable(value) for key, value in schema.items()}
    properties = node.get("properties")
    if isinstance(properties, dict):
        nullable = set()
        for name, prop in list(properties.items()):
            single = _not_null(prop)
            if single is not None:
                properties[name] = single
                nullable.add(name)
        if isinstance(node.get("required"), list):
            node["required"] = [name for name in node["required"] if name not in nullable]
            if not node["required"]:
                del node["required"]
    return node


def _not_null(prop: Any) -> dict[str, Any] | None:
    """A nullable property's schema without its null, or None when it is not nullable."""
    if not isinstance(prop, dict):
        return None
    kind = prop.get("type")
    if isinstance(kind, list) and "null" in kind:
        rest = [t for t in kind if t != "null"]
        single = {**prop, "type": rest[0] if len(rest) == 1 else rest}
        if isinstance(single.get("enum"), list):
            single["enum"] = [value for value in single["enum"] if value is not None]
        if single.get("default", 0) is None:
            del single["default"]
        return single
    options = prop.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [option for option in options if option != {"type": "null"}]
        base = {key: value for key, value in prop.items() if key not in ("anyOf", "default")}
        return {**rest[0], **base} if len(rest) == 1 else {**base, "anyOf": rest}
    return None


def _strip_titles(schema: Any) -> None:
    if isinstance(schema, dict):
        properties = schema.get("properties")
        schema.pop("title", None)
        if isinstance(properties, dict):
            for value in properties.values():
                _strip_titles(value)
        for key in ("items", "anyOf", "allOf", "oneOf", "$defs", "additionalProperties"):
            child = schema.get(key)
            if isinstance(child, list):
                for item in child:
                    _strip_titles(item)
            elif isinstance(child, dict):
                if key == "$defs":
                    for item in child.values():
                        _strip_titles(item)
                else:
                    _strip_titles(child)
