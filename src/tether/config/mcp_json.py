"""MCP servers from a JSON file in the shape Claude Desktop, Claude Code and Cursor read
(``{"mcpServers": {"name": {"command", "args", "env"} | {"url", "headers"}}}``), so a user
does not rewrite their servers as TOML::

    [[mcp]]
    file = "~/.config/Claude/claude_desktop_config.json"   # relative: to this tether.toml
    servers = ["github", "files"]                          # optional: only these

Every server of the file (or of ``servers``) becomes an ``[[mcp]]`` entry before the
configuration is validated, with tether's defaults and what the importing entry sets
(``trusted``, ``capabilities``, ``timeout_secs``, ``prefix_tools``, ``disabled``,
``env_passthrough``): an imported server is **not trusted** unless the entry says
``trusted = true``, whatever its transport (the file was written for another program, and
often fetches its servers at start: ``npx -y ...``), and capabilities only widen.
``${VAR}`` and ``${VAR:-default}`` in ``command``, ``args``, ``env``, ``url`` and
``headers`` are read from the environment when the server is built (``expand``), as
Claude Code does; a bare ``$VAR`` is left as it is.

The file is read strictly: anything tether cannot run as written (an unknown key, a wrong
type, the older SSE transport, a ``servers`` name the file lacks) is a ``ConfigError``
naming the file and the key's path in it.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from tether.config.schema import McpCapabilities, _Strict
from tether.errors import ConfigError

# What a server entry of the file may hold. "type" names the transport; without it,
# "command" means stdio and "url" streamable HTTP.
SERVER_KEYS = ("type", "command", "args", "env", "url", "headers", "disabled")
STDIO_TYPES = ("stdio",)
HTTP_TYPES = ("http", "streamable-http", "streamableHttp")

_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class McpFileEntry(_Strict):
    """An ``[[mcp]]`` entry that imports a file's servers (it has ``file``)."""

    file: str
    servers: list[str] | None = None
    trusted: bool = False
    capabilities: McpCapabilities = Field(default_factory=McpCapabilities)
    timeout_secs: float = Field(default=60.0, gt=0)
    prefix_tools: bool = True
    disabled: bool = False
    env_passthrough: list[str] = Field(default_factory=list)


def resolve_files(layer: Mapping[str, Any], folder: Path) -> None:
    """In one tether.toml's ``[[mcp]]`` entries, a relative (or ``~``) ``file`` made
    absolute against the folder of the tether.toml that names it (not the current folder:
    ``tether -w elsewhere`` reads the same file). Read loosely: what is
    malformed is reported when the entries are imported."""
    entries = layer.get("mcp")
    if not isinstance(entries, list):
        return
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("file"), str) and entry["file"]:
            entry["file"] = os.path.abspath(folder / Path(entry["file"]).expanduser())


def named_files(layer: Mapping[str, Any]) -> list[Path]:
    """The JSON files one layer's ``[[mcp]]`` entries import (what they run is decided
    there: the file tools may not change them)."""
    entries = layer.get("mcp")
    if not isinstance(entries, list):
        return []
    return [Path(e["file"]) for e in entries
            if isinstance(e, Mapping) and isinstance(e.get("file"), str) and e["file"]]


def import_servers(entries: Any) -> Any:
    """``[[mcp]]`` entries with each ``file`` entry replaced by the servers it imports, as
    ``[[mcp]]`` entries; others are kept as they are (validated with the rest)."""
    if not isinstance(entries, list):
        return entries
    out: list[Any] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, Mapping) and "file" in entry:
            out.extend(_imported(index, entry))
        else:
            out.append(entry)
    return out


def _imported(index: int, raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    where = f"mcp.{index}"
    try:
        entry = McpFileEntry.model_validate(raw)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                problems.append(f"{key}: an entry with file imports its servers from that "
                                f"file; {key} is not one of its keys "
                                f"({', '.join(McpFileEntry.model_fields)})"
                                + _did_you_mean(key, list(McpFileEntry.model_fields)))
            else:
                problems.append(f"{key}: {err['msg']}")
        raise ConfigError(f"invalid configuration: {where}: " + "; ".join(problems)) from None
    path = Path(entry.file).expanduser()
    servers = _read(path)
    chosen = list(servers)
    if entry.servers is not None:
        missing = [n for n in entry.servers if n not in servers]
        if missing:
            hint = _did_you_mean(missing[0], list(servers))
            raise ConfigError(f"{where}.servers names {', '.join(map(repr, missing))}, which "
                              f"{path} does not hold (it holds: "
                              f"{', '.join(servers) or 'no servers'}){hint}")
        chosen = list(dict.fromkeys(entry.servers))
    out: list[dict[str, Any]] = []
    taken: dict[str, str] = {}
    for key in chosen:
        name = _NOT_NAME_CHAR.sub("_", key)
        if name in taken:
            raise ConfigError(f"{path}: mcpServers {_quoted(taken[name])} and {_quoted(key)} "
                              f"both become the server name {name!r} (characters other than "
                              f"letters, digits, _ and - become _); rename one")
        taken[name] = key
        out.append(_server(path, key, name, servers[key], entry))
    return out


def _read(path: Path) -> dict[str, Any]:
    """The file's ``mcpServers`` object, checked to be one."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"[[mcp]] file {path}: cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 (byte 0x{data[e.start]:02x} at offset "
                          f"{e.start}); save it as UTF-8") from None
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ConfigError(f"{path}: not valid JSON: it nests too deep") from None
    except _DuplicateKey as e:
        raise ConfigError(f"{path}: {e}: which one is meant?") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object holding "
                          f"\"mcpServers\", not {_kind(document)}")
    if "mcpServers" not in document:
        others = f" (it has {', '.join(map(repr, list(document)[:8]))})" if document else ""
        raise ConfigError(f"{path}: no \"mcpServers\" object{others}: tether reads the "
                          f"{{\"mcpServers\": {{\"name\": {{\"command\": ...}}}}}} shape of "
                          f"claude_desktop_config.json")
    servers = document["mcpServers"]
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: mcpServers: must be an object of servers by name, not "
                          f"{_kind(servers)}")
    return servers


def _server(path: Path, key: str, name: str, spec: Any,
            entry: McpFileEntry) -> dict[str, Any]:
    """One server of the file as an ``[[mcp]]`` entry."""
    at = f"mcpServers.{_quoted(key)}"

    def bad(field: str, problem: str) -> ConfigError:
        return ConfigError(f"{path}: {at}{'.' + field if field else ''}: {problem}")

    if not isinstance(spec, dict):
        raise bad("", f"must be an object ({{\"command\": ...}} or {{\"url\": ...}}), not "
                      f"{_kind(spec)}")
    unknown = [k for k in spec if k not in SERVER_KEYS]
    if unknown:
        raise bad(unknown[0], f"not a key tether reads (it reads {', '.join(SERVER_KEYS)})"
                              + _did_you_mean(unknown[0], list(SERVER_KEYS)))
    kind = spec.get("type")
    if kind is not None and kind not in (*STDIO_TYPES, *HTTP_TYPES):
        if kind == "sse":
            raise bad("type", "\"sse\" is the older HTTP+SSE transport, which tether does not "
                              "speak; give the server's streamable HTTP endpoint with "
                              "\"type\": \"http\"")
        raise bad("type", f"must be \"stdio\" or \"http\", not {json.dumps(kind)}")
    command, url = spec.get("command"), spec.get("url")
    if (command is None) == (url is None):
        raise bad("", "needs either \"command\" (a server tether starts) or \"url\" (a "
                      "streamable HTTP server), not both or neither")
    stdio = command is not None
    if kind is not None and (kind in STDIO_TYPES) != stdio:
        raise bad("type", f"{json.dumps(kind)} does not fit "
                          f"{'command' if stdio else 'url'}")
    out: dict[str, Any] = {
        "name": name, "trusted": entry.trusted, "capabilities": entry.capabilities.model_dump(),
        "timeout_secs": entry.timeout_secs, "prefix_tools": entry.prefix_tools,
        "env_passthrough": list(entry.env_passthrough), "expand_env": True,
        "source_file": str(path),
    }
    disabled = spec.get("disabled", False)
    if not isinstance(disabled, bool):
        raise bad("disabled", f"must be true or false, not {_kind(disabled)}")
    out["disabled"] = entry.disabled or disabled
    if stdio:
        for field in ("url", "headers"):
            if field in spec:
                raise bad(field, "belongs to a url server; this one has a command")
        out["command"] = _text(bad, "command", command, empty=False)
        args = spec.get("args", [])
        if not isinstance(args, list):
            raise bad("args", f"must be a list of strings, not {_kind(args)}")
        out["args"] = [_text(bad, f"args[{i}]", a) for i, a in enumerate(args)]
        out["env"] = _strings(bad, "env", spec.get("env", {}))
    else:
        for field in ("args", "env"):
            if field in spec:
                raise bad(field, "belongs to a command server; this one has a url")
        out["url"] = _text(bad, "url", url, empty=False)
        out["headers"] = _strings(bad, "headers", spec.get("headers", {}))
    return out


def _text(bad: Any, field: str, value: Any, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise bad(field, f"must be a string, not {_kind(value)}")
    if not empty and not value.strip():
        raise bad(field, "is empty")
    if "\x00" in value:
        raise bad(field, "contains a NUL character (\\u0000)")
    return value


def _strings(bad: Any, field: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise bad(field, f"must be an object of strings, not {_kind(value)}")
    return {_text(bad, field, k): _text(bad, f"{field}.{_quoted(k)}", v)
            for k, v in value.items()}


class _DuplicateKey(ValueError):
    """A key given twice in one object (JavaScript would keep the last without a word)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _quoted(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


# --- ${VAR} -----------------------------------------------------------------------------------


def expand(value: str, where: str, env: Mapping[str, str] | None = None) -> str:
    """``value`` with ``${VAR}`` and ``${VAR:-default}`` read from the environment. A
    variable that is not set and has no default is a ConfigError naming ``where``."""
    env = os.environ if env is None else env

    def one(match: re.Match[str]) -> str:
        variable, default = match.group(1), match.group(2)
        found = env.get(variable)
        if found is not None and (found or default is None):
            return found
        if default is not None:
            return default
        raise ConfigError(f"{where} uses ${{{variable}}}, which is not set: set it, give a "
                          f"default (${{{variable}:-...}}), or leave the server out")

    return _VARIABLE.sub(one, value)


__all__ = ["McpFileEntry", "expand", "import_servers", "named_files", "resolve_files"]
