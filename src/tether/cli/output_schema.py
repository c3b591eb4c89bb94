"""What ``tether run --output-schema`` takes: a JSON Schema file, the schema inline (text
that starts with ``{``), or a short list of fields (``'name, age int'``).

The short form is fields separated by commas (by newlines instead when there is a newline,
so a description may hold commas), each ``NAME [TYPE][: DESCRIPTION]``: ``NAME`` a letter
or ``_`` then letters, digits or ``_``; ``TYPE`` one of ``str`` (the default), ``int``,
``float``, ``bool``, or ``list[T]`` of one of those; the description, after a colon, is
what the model is told the field holds. Every field is required and no other is allowed.
``'title, year int, tags list[str]: a few keywords'`` is

    {"type": "object",
     "properties": {"title": {"type": "string"}, "year": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"},
                             "description": "a few keywords"}},
     "required": ["title", "year", "tags"], "additionalProperties": false}

Whatever the form, the schema is checked before any request: text that is no valid JSON
Schema, or whose top level is not an object, is a usage error saying why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tether.errors import ConfigError

TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
_FIELD = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\s+(?P<type>[^\s:]+))?\s*"
                    r"(?::\s*(?P<description>.*))?", re.DOTALL)
_LIST = re.compile(r"list\[(?P<item>[a-z]+)\]")
_SHORT_HELP = ("fields separated by commas, each NAME [TYPE][: DESCRIPTION], TYPE one of "
               "str (the default), int, float, bool, list[T]: e.g. 'name, age int'")


def output_spec(given: str) -> Any:
    """The OutputSpec ``--output-schema given`` asks for, checked here (a ConfigError says
    what is wrong). The run keeps its tools (``with_tools()``): the model may work first."""
    from tether.output import OutputSpec

    schema, where, default_name = _schema_of(given)
    if not isinstance(schema, dict):
        raise ConfigError(f"--output-schema {where}: a JSON Schema must be a JSON object "
                          f"({{\"type\": \"object\", \"properties\": ...}}), not "
                          f"{type(schema).__name__}")
    _check_schema(where, schema)
    top = schema.get("type", "object" if "properties" in schema else None)
    if top != "object":
        shown = json.dumps(top) if top is not None else "not set"
        raise ConfigError(f"--output-schema {where}: the top level must be an object schema "
                          f"(\"type\": \"object\"; its \"type\" is {shown}): the answer is "
                          f"given as a tool's arguments, which are an object. Wrap the value "
                          f"in a property, e.g. {{\"type\": \"object\", \"properties\": "
                          f"{{\"value\": ...}}}}")
    title = schema.get("title")
    name = title if isinstance(title, str) and title.strip() else default_name
    description = schema.get("description")
    return OutputSpec(name, description if isinstance(description, str) and description
                      else "Give the final answer in this shape.", schema).with_tools()


def _schema_of(given: str) -> tuple[Any, str, str]:
    """The schema ``given`` holds, how to name it in an error, and the answer's default
    name: a file (one that exists, or a name ending in .json), inline JSON, or fields."""
    text = given.strip()
    if text.startswith("{"):
        try:
            return json.loads(text), "(inline JSON)", "answer"
        except (ValueError, RecursionError) as e:
            raise ConfigError(f"--output-schema: the inline schema is not valid JSON: "
                              f"{e}") from None
    path = Path(given)
    if given.endswith(".json") or _is_file(path):
        try:
            schema = json.loads(path.read_bytes().decode("utf-8-sig"))
        except (OSError, ValueError, RecursionError) as e:
            raise ConfigError(f"--output-schema {path}: cannot read a JSON Schema: "
                              f"{e}") from None
        return schema, str(path), path.stem
    return short_schema(given), repr(given), "answer"


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for a path, a NUL
        return False


def short_schema(text: str) -> dict[str, Any]:
    """The object schema of a short list of fields (see the module docstring); a
    ConfigError names what is wrong, and how the short form goes."""
    parts = text.split("\n") if "\n" in text else text.split(",")
    properties: dict[str, Any] = {}
    for part in (p.strip() for p in parts):
        if not part:
            continue  # a trailing comma, a blank line
        field = _FIELD.fullmatch(part)
        if field is None:
            raise ConfigError(f"--output-schema: {part!r} is not a field ({_SHORT_HELP})")
        name = field["name"]
        if name in properties:
            raise ConfigError(f"--output-schema: the field {name!r} is named twice")
        prop = _type(field["type"] or "str", name)
        if field["description"] and field["description"].strip():
            prop["description"] = field["description"].strip()
        properties[name] = prop
    if not properties:
        raise ConfigError(f"--output-schema: no fields given ({_SHORT_HELP})")
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def _type(word: str, name: str) -> dict[str, Any]:
    if word in TYPES:
        return {"type": TYPES[word]}
    listed = _LIST.fullmatch(word)
    if listed is not None and listed["item"] in TYPES:
        return {"type": "array", "items": {"type": TYPES[listed["item"]]}}
    raise ConfigError(f"--output-schema: the field {name!r} has the unknown type {word!r}; "
                      f"types: str (the default), int, float, bool, list[T] of one of those")


def _check_schema(where: str, schema: dict[str, Any]) -> None:
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema,
                                                  default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        at = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ConfigError(f"--output-schema {where}: not a valid JSON Schema at {at}: "
                          f"{e.message}") from None
    except (TypeError, ValueError, RecursionError) as e:  # a $schema that is not a string
        raise ConfigError(f"--output-schema {where}: not a valid JSON Schema: {e}") from None


__all__ = ["TYPES", "output_spec", "short_schema"]
