"""Reading tether.toml: the layers, later wins.

Built-in defaults -> the user file (~/.config/tether/config.toml, or ``TETHER_CONFIG``) ->
./tether.toml in the workspace -> TETHER_* environment variables -> flags. Each file is
read strictly (UTF-8 TOML, no NUL); the merged result is validated by ``schema.Config``.
"""

from __future__ import annotations

import codecs
import copy
import difflib
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tether.config.mcp_json import import_servers, resolve_files
from tether.config.mcp_json import named_files as named_mcp_files
from tether.config.schema import DEFAULTS, Config, SkillsSection
from tether.config.tool_files import python_files
from tether.errors import ConfigError
from tether.paths import default_locations, store_files, user_config_dir

# Every TETHER_* variable tether itself reads. One that is not here but is spelled like one
# of them is a typo that would silently do nothing: a ConfigError (other TETHER_* names are
# left alone: they may be another program's).
ENV_VARIABLES = ("TETHER_CONFIG", "TETHER_PROVIDER", "TETHER_MODEL", "TETHER_BASE_URL",
                 "TETHER_MAX_TURNS", "TETHER_PERMISSION_MODE", "TETHER_STORE",
                 "TETHER_STORE_URL", "TETHER_CACHE_DIR")


def user_config_path() -> Path:
    return user_config_dir(os.environ) / "config.toml"


def load_config(
    workspace: str | Path = ".",
    overrides: Mapping[str, Any] | None = None,
    *,
    user_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """The merged configuration. ``overrides`` are flag values as a nested dict."""
    env = os.environ if env is None else env
    layers = config_layers(workspace, overrides, user_file=user_file, env=env)
    merged: dict[str, Any] = copy.deepcopy(DEFAULTS)
    sources = ["defaults"]
    for source, layer in layers:
        _merge(merged, layer)
        sources.append(source)
    user, project = _files(workspace, user_file, env)
    # Both files are tether's own even when absent: one written now is read next time.
    own: list[Any] = [*default_locations(env), user, project]
    # [[mcp]] file = "...": the servers of that JSON file, as entries of their own.
    merged["mcp"] = import_servers(merged.get("mcp", []))
    config = _validate(merged, sources)  # first: a malformed value is an error naming it
    for source, named in layers:
        if source != "environment":
            own.extend(_named_files(named, workspace))
    return config.model_copy(update={"own_files": [str(p) for p in own],
                                     "skill_folders": skill_folders(layers, project, env)})


def skill_folders(layers: list[tuple[str, Mapping[str, Any]]], project: Path,
                  env: Mapping[str, str]) -> list[tuple[str, bool]]:
    """The folders of skills: ``~/.config/tether/skills`` first, then each layer's
    ``[skills]`` (a file's paths relative to its folder), trusted unless the project's own
    tether.toml names them (a clone's file is not the user's word) or they are listed as
    ``untrusted``. Each layer's table is checked as it is: a later layer replaces an
    earlier one's list in the merged configuration, here both count."""
    out = [(str(user_config_dir(env) / "skills"), True)]
    for source, layer in layers:
        table = layer.get("skills")
        if table is None:
            continue
        try:
            section = SkillsSection.model_validate(table)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'skills'}: {err['msg']}"
                                 for err in e.errors())
            raise ConfigError(f"{source}: [skills]: {problems}") from None
        is_file = source not in ("environment", "flags")
        base = Path(source).parent if is_file else Path.cwd()
        trusted = Path(source) != project
        out.extend((str(base / Path(p).expanduser()), trusted) for p in section.paths)
        out.extend((str(base / Path(p).expanduser()), False) for p in section.untrusted)
    return out


def config_layers(
    workspace: str | Path = ".",
    overrides: Mapping[str, Any] | None = None,
    *,
    user_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[tuple[str, Mapping[str, Any]]]:
    """The layers above the built-in defaults, each with where it came from (a file's
    path, ``environment``, ``flags``), in the order they apply: later wins."""
    env = os.environ if env is None else env
    if not _is_dir(Path(workspace)):
        raise ConfigError(f"the workspace {str(workspace)!r} is not a folder (-w / --workspace)")
    _refuse_misspelt_variables(env)
    user, project = _files(workspace, user_file, env)
    if env.get("TETHER_CONFIG") and not _is_file(user) and str(user) != os.devnull:
        raise ConfigError(f"TETHER_CONFIG names {str(user)!r}, which is not a file; point it "
                          f"at your config file ({os.devnull} for none), or unset it to use "
                          f"{user_config_path()}")
    layers: list[tuple[str, Mapping[str, Any]]] = []
    merged: dict[str, Any] = copy.deepcopy(DEFAULTS)
    for path in (user, project):
        if _is_file(path):
            layer = _read_toml(path)
            # [[mcp]] file = "...": relative to the folder of the file that names it.
            resolve_files(layer, path.parent)
            layers.append((str(path), layer))
            _merge(merged, layer)
    env_layer = _env_layer(env, merged)
    if env_layer:
        layers.append(("environment", env_layer))
    if overrides:
        layers.append(("flags", dict(overrides)))
    return layers


def origins(layers: list[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """Where each key set by ``layers`` came from, by dotted path (``providers.local.model``:
    ``./tether.toml``). A key no layer sets comes from the defaults. Arrays of tables
    (``[[mcp]]``) are replaced whole, so their origin is the array's."""
    out: dict[str, str] = {}

    def walk(prefix: str, table: Mapping[str, Any], source: str) -> None:
        for key, value in table.items():
            path = f"{prefix}{key}"
            if isinstance(value, Mapping):
                walk(path + ".", value, source)
            else:
                for known in [k for k in out if k.startswith(path + ".")]:
                    del out[known]  # a value that replaces a table replaces all of it
                out[path] = source

    walk("", DEFAULTS, "defaults")
    for source, layer in layers:
        walk("", layer, source)
    return out


def _files(workspace: str | Path, user_file: str | Path | None,
           env: Mapping[str, str]) -> tuple[Path, Path]:
    user = Path(env.get("TETHER_CONFIG") or user_file or user_config_path()).expanduser()
    return user, Path(workspace) / "tether.toml"


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a NUL in the name, a folder it may not enter
        return False


def _named(value: Any) -> bool:
    """Whether a configuration value names a file (a layer later overridden is read too,
    and never validated: "" is no file)."""
    return isinstance(value, str) and bool(value.strip())


def _named_files(layer: Mapping[str, Any], workspace: str | Path) -> list[Path]:
    """The files of tether's that one configuration layer names: its store, its cache
    folder, its Temporal blob folder, its tool files. Read loosely: validation reports a
    malformed value."""
    out: list[Path] = []
    store, local, tools, hooks = (layer.get(k) for k in ("store", "local", "tools", "hooks"))
    if isinstance(store, Mapping) and _named(store.get("path")):
        out.extend(store_files(store["path"]))
    out.extend(named_mcp_files(layer))
    temporal = layer.get("temporal")
    if isinstance(temporal, Mapping) and _named(temporal.get("blob_dir")):
        out.append(Path(temporal["blob_dir"]).expanduser())
    if isinstance(local, Mapping) and _named(local.get("cache_dir")):
        out.append(Path(local["cache_dir"]).expanduser())
    if isinstance(tools, Mapping) and isinstance(tools.get("python"), list):
        given = tools.get("workspace")
        root = Path(given) if isinstance(given, str) and _named(given) else Path(workspace)
        references = [r for r in tools["python"] if _named(r)]
        out.extend(python_files(_workspace_path(root, r) for r in references))
    if isinstance(hooks, list):  # [[hooks]] python: code that runs, as a tool file's
        given = tools.get("workspace") if isinstance(tools, Mapping) else None
        root = Path(given) if isinstance(given, str) and _named(given) else Path(workspace)
        references = [h["python"] for h in hooks
                      if isinstance(h, Mapping) and _named(h.get("python"))]
        out.extend(python_files(_workspace_path(root, r) for r in references))
    return out


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError) as e:  # a folder it may not enter, a NUL in the name
        raise ConfigError(f"{path}: cannot read: {e}") from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    try:
        document = tomllib.loads(_toml_text(path, data))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or inline tables nest too deep")\
            from None
    _refuse_nul(path, document, ())
    return document


def _toml_text(path: Path, data: bytes) -> str:
    """The file's text: TOML is UTF-8 (a UTF-8 byte order mark is skipped). Anything else
    is a ConfigError that names the encoding it looks like and the line."""
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise ConfigError(f"{path}: the file is UTF-32 (it starts with a UTF-32 byte order "
                          f"mark); TOML files must be UTF-8: save it as UTF-8")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or _looks_utf16(data):
        raise ConfigError(f"{path}: the file is UTF-16; TOML files must be UTF-8: save it "
                          f"as UTF-8")
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(
            f"{path}: line {line} is not UTF-8 (byte 0x{data[e.start]:02x}); TOML files must "
            f"be UTF-8. Was it saved as Latin-1 or another legacy encoding? Save it as "
            f"UTF-8") from None


def _looks_utf16(data: bytes) -> bool:
    """UTF-16 without a byte order mark: ASCII text with a NUL beside every character."""
    if len(data) < 4 or len(data) % 2:
        return False
    half = len(data) // 2
    return data[0::2].count(0) > half // 2 or data[1::2].count(0) > half // 2


def _refuse_nul(path: Path, value: Any, where: tuple[str, ...]) -> None:
    """No string of the file holds a NUL: no path, command, name or header can."""
    def name(keys: tuple[str, ...]) -> str:
        return ".".join(keys) or "(top level)"

    if isinstance(value, str) and "\x00" in value:
        raise ConfigError(f"{path}: {name(where)} contains a NUL character (\\u0000), which "
                          f"no path, command, name or header can hold")
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                raise ConfigError(f"{path}: a key in {name(where)} contains a NUL character "
                                  f"(\\u0000): {key!r}")
            _refuse_nul(path, item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_nul(path, item, (*where, str(index)))


def _env_layer(env: Mapping[str, str], merged: dict[str, Any]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    provider = env.get("TETHER_PROVIDER")
    if provider:
        layer["default_provider"] = provider
    name = provider or merged.get("default_provider", "local")
    known = merged.get("providers")
    for var, key in (("TETHER_MODEL", "model"), ("TETHER_BASE_URL", "base_url")):
        # Only for a configured provider: setting a key of an unknown one would configure a
        # provider of that name from nothing (an openai-chat entry without a base_url). The
        # unknown name is reported when the provider is looked up, naming the configured ones.
        # A default_provider that is not a name is reported by the validation below.
        if env.get(var) and isinstance(name, str) and isinstance(known, Mapping) \
                and name in known:
            layer.setdefault("providers", {}).setdefault(name, {})[key] = env[var]
    if env.get("TETHER_MAX_TURNS"):
        try:
            layer.setdefault("agent", {})["max_turns"] = int(env["TETHER_MAX_TURNS"])
        except ValueError:
            raise ConfigError(f"TETHER_MAX_TURNS must be a whole number, not "
                              f"{env['TETHER_MAX_TURNS']!r}") from None
    if env.get("TETHER_PERMISSION_MODE"):
        layer.setdefault("tools", {})["permission_mode"] = env["TETHER_PERMISSION_MODE"]
    return layer


def _refuse_misspelt_variables(env: Mapping[str, str]) -> None:
    """A TETHER_* variable tether does not read, spelled like one it does (TETHER_MODLE),
    is a ConfigError naming the one it resembles."""
    names = [v.removeprefix("TETHER_") for v in ENV_VARIABLES]
    for variable in sorted(env):
        if not variable.startswith("TETHER_") or variable in ENV_VARIABLES:
            continue
        # The part after TETHER_ decides: the shared prefix would make every name look close.
        close = difflib.get_close_matches(variable.removeprefix("TETHER_"), names, n=1,
                                          cutoff=0.7)
        if close:
            raise ConfigError(f"the environment variable {variable} is not one tether reads: "
                              f"did you mean TETHER_{close[0]}? (unset {variable}, or set "
                              f"TETHER_{close[0]} instead)")


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """Deep-merge tables; anything else (lists, arrays of tables, scalars) is replaced."""
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _validate(data: dict[str, Any], sources: list[str]) -> Config:
    try:
        return Config.model_validate({**data, "sources": sources})
    except ValidationError as e:
        problems = []
        for err in e.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key {where}" + _did_you_mean(err["loc"]))
            else:
                problems.append(f"{where}: {err['msg']}")
        raise ConfigError("invalid configuration (" + ", ".join(sources[1:] or ["defaults"])
                          + "): " + "; ".join(problems)) from None



def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """``: did you mean agent.max_turns?`` for an unknown key whose spelling is close to a
    valid key at its level (``agent.max_turn``), else nothing."""
    level = _keys_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), level, n=1, cutoff=0.6) if level else []
    if not close:
        return ""
    return f": did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?"


def _keys_at(path: tuple[int | str, ...]) -> list[str]:
    """The valid keys of the table at ``path`` in tether.toml (``("agent",)``,
    ``("providers", "x")``, ``("subagents", 0)``), or [] when it is not a table of
    known keys."""
    model: Any = Config
    steps = list(path)
    while steps:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        field = model.model_fields.get(str(steps.pop(0)))
        if field is None:
            return []
        model = field.annotation
        # Through optional values, and into the values of dicts and the items of lists: a
        # provider's name or a sub-agent's index is the next step of the path.
        while True:
            origin = typing.get_origin(model)
            args = [a for a in typing.get_args(model) if a is not type(None)]
            if origin in (typing.Union, types.UnionType) and len(args) == 1:
                model = args[0]
            elif origin in (dict, list) and args and steps:
                model = args[-1]
                steps.pop(0)
            else:
                break
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [name for name, f in model.model_fields.items() if not f.exclude]
    return []


def _workspace_path(workspace: Path, reference: str) -> str:
    """A file reference made relative to the workspace; module references stay as they are."""
    target, sep, attr = reference.rpartition(":")
    if not sep or not attr.isidentifier():
        target, sep, attr = reference, "", ""
    if not (target.endswith(".py") or "/" in target):
        return reference
    path = Path(target)
    return f"{path if path.is_absolute() else workspace / path}{sep}{attr}"


