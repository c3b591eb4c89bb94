"""Tools written in a Python file of your own, loaded by reference (``tether run --tools``).

A reference is a file path or an importable module, optionally with ``:attr``:

- ``examples/weather.py``: every module-level ``Tool`` (or ``Toolset``) in the file, in the
  order they are defined; when the module has ``__all__``, only the names it lists.
- ``examples/weather.py:get_weather`` or ``my_pkg.tools:get_weather``: that one attribute;
  it may be a ``Tool``, a ``Toolset``, or a list/tuple of them.
- ``my_pkg.tools``: every module-level tool of an importable module.

Loading a file runs it, as ``python FILE`` would: only name files you trust.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from tether.errors import ConfigError
from tether.run.hooks import Hook, Hooks
from tether.tools.tool import Tool
from tether.tools.toolsets import Toolset


def load_tools(reference: str) -> list[Tool | Toolset]:
    """The tools ``reference`` names (see the module docstring); a ConfigError says why
    there are none."""
    target, attr = split_reference(reference)
    module = _import_file(Path(target)) if _is_path(target) else _import_module(target)
    if attr is not None:
        if not hasattr(module, attr):
            raise ConfigError(f"--tools {reference}: {target} has no attribute {attr!r}")
        found = _as_tools(getattr(module, attr))
        if found is None:
            raise ConfigError(f"--tools {reference}: {attr} is a "
                              f"{type(getattr(module, attr)).__name__}, not a Tool (decorate "
                              f"the function with @tool) or a list of tools")
        return found
    names = getattr(module, "__all__", None)
    items = ([getattr(module, n) for n in names if hasattr(module, n)] if names is not None
             else list(vars(module).values()))
    tools: list[Tool | Toolset] = [t for t in items if _is_tool(t)]
    if not tools:
        raise ConfigError(f"--tools {reference}: no module-level tools in {target} (define "
                          f"them with @tool, e.g. `@tool\\ndef get_weather(city: str): ...`)")
    return tools


def load_tool_references(references: Iterable[str]) -> list[Tool | Toolset]:
    """All tools of several references, in order."""
    out: list[Tool | Toolset] = []
    for reference in references:
        out.extend(load_tools(reference))
    return out


def split_reference(reference: str) -> tuple[str, str | None]:
    """A reference's target (a path or a module) and its ``:attr``, if any."""
    # "C:\\x.py" has a drive colon; only a colon after the last path separator names an attr.
    head, sep, tail = reference.rpartition(":")
    if sep and tail and "/" not in tail and "\\" not in tail and tail.isidentifier():
        return head, tail
    return reference, None


def _is_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target or Path(target).is_file()


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise ConfigError(f"--tools: {path} is not a file")
    resolved = path.resolve()
    # A stable, unique module name per file, so two files both called tools.py do not clash.
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    name = f"_tether_tools_{resolved.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--tools: cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file failed: name it, without our traceback
        del sys.modules[name]
        raise ConfigError(f"--tools: running {path} failed: {type(e).__name__}: {e}") from e
    return module


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ConfigError(f"--tools: cannot import {name!r} ({e}); give a file path "
                          f"(tools.py) or an importable module (my_pkg.tools)") from None
    except Exception as e:
        raise ConfigError(f"--tools: importing {name} failed: {type(e).__name__}: {e}") from e


def _is_tool(value: Any) -> bool:
    # Toolset is a structural protocol (anything with .tools); a module (`import tether`)
    # or a class would match it, so only instances count.
    return isinstance(value, Tool) or (isinstance(value, Toolset)
                                       and not isinstance(value, ModuleType | type))


def _as_tools(value: Any) -> list[Tool | Toolset] | None:
    if _is_tool(value):
        return [value]
    if isinstance(value, list | tuple) and value and all(_is_tool(v) for v in value):
        return list(value)
    return None


def load_hook(reference: str) -> Hook:
    """The hook ``reference`` names (``[[hooks]] python``): ``file.py:name`` or
    ``module:name``, loaded as a tool file is. A class or a function there is called with no
    arguments to make the hook; what it names must have a hook method."""
    target, attr = split_reference(reference)
    if attr is None:
        raise ConfigError(f"[[hooks]] python = {reference!r}: name the hook after a colon "
                          f"(hooks.py:audit, or a module's: tether.guardrails:"
                          f"secrets_in_answer)")
    module = _import_file(Path(target)) if _is_path(target) else _import_module(target)
    if not hasattr(module, attr):
        raise ConfigError(f"[[hooks]] {reference}: {target} has no attribute {attr!r}")
    value = getattr(module, attr)
    if isinstance(value, type) or inspect.isfunction(value):
        try:
            value = value()
        except Exception as e:  # the user's factory failed: name it, without our traceback
            raise ConfigError(f"[[hooks]] {reference}: calling {attr}() failed: "
                              f"{type(e).__name__}: {e}") from e
    try:
        Hooks.of([value])
    except ConfigError as e:
        raise ConfigError(f"[[hooks]] {reference}: {e}") from None
    hook: Hook = value
    return hook


__all__ = ["load_hook", "load_tool_references", "load_tools"]


def python_files(references: Iterable[str]) -> list[Path]:
    """The files behind ``[tools] python`` / ``--tools`` references (``file.py[:name]`` or
    ``module[:name]``), with the ``__pycache__`` beside each (compiled code that runs in its
    place). A module that cannot be found names nothing (loading it fails anyway)."""
    out: list[Path] = []
    for reference in references:
        target, _ = split_reference(reference)
        origin: str | None = target
        if not _is_path(target):
            try:
                spec = importlib.util.find_spec(target)
            except (ImportError, ValueError):
                spec = None
            origin = spec.origin if spec is not None and spec.has_location else None
        if origin:
            path = Path(origin).expanduser()
            out += [path, path.parent / "__pycache__"]
    return out
