"""Loading tools from a Python file or module (``tether run --tools``)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from tether.config.tool_files import load_tool_references, load_tools
from tether.errors import ConfigError
from tether.tools.tool import Tool

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_the_weather_example_offers_get_weather_with_a_repeatable_forecast() -> None:
    tools = load_tools(str(EXAMPLES / "weather.py"))
    assert [t.name for t in tools if isinstance(t, Tool)] == ["get_weather"]
    weather = tools[0]
    assert isinstance(weather, Tool)
    assert weather.spec.schema_json["required"] == ["city"]
    first: object = asyncio.run(weather.handler({"city": "Paris"}, None))  # type: ignore[arg-type]
    again: object = asyncio.run(weather.handler({"city": " paris "}, None))  # type: ignore[arg-type]
    assert first == again
    assert isinstance(first, str) and first.startswith("Paris: ")


def test_a_file_offers_its_module_level_tools_in_the_order_they_are_bound(
        tmp_path: Path) -> None:
    path = _write(tmp_path, "mine.py", """
        import tether
        from tether import tool
        from tether.builtins import calculator as imported_tool

        @tool
        def second(x: int) -> int:
            '''Second.'''
            return x

        @tool
        def first(x: int) -> int:
            '''First.'''
            return x

        def not_a_tool() -> None: ...
    """)
    names = [t.name for t in load_tools(str(path)) if isinstance(t, Tool)]
    # An imported tool is module-level too (use __all__ to leave it out); module objects
    # (`import tether`) are not taken for toolsets.
    assert names == ["calculator", "second", "first"]


def test_all_limits_a_file_to_the_tools_it_lists(tmp_path: Path) -> None:
    path = _write(tmp_path, "listed.py", """
        from tether import tool
        from tether.builtins import calculator

        __all__ = ["mine"]

        @tool
        def mine(x: int) -> int:
            '''Mine.'''
            return x
    """)
    assert [t.name for t in load_tools(str(path)) if isinstance(t, Tool)] == ["mine"]


def test_a_file_attribute_reference_loads_only_that_tool(tmp_path: Path) -> None:
    path = _write(tmp_path, "two.py", """
        from tether import tool

        @tool
        def a(x: int) -> int:
            '''A.'''
            return x

        @tool
        def b(x: int) -> int:
            '''B.'''
            return x

        BOTH = [a, b]
    """)
    assert [t.name for t in load_tools(f"{path}:b")] == ["b"]  # type: ignore[union-attr]
    assert [t.name for t in load_tools(f"{path}:BOTH")] == ["a", "b"]  # type: ignore[union-attr]


def test_a_module_reference_imports_the_module() -> None:
    tools = load_tools("tether.builtins:calculator")
    assert [t.name for t in tools] == ["calculator"]  # type: ignore[union-attr]


def test_several_references_keep_their_order(tmp_path: Path) -> None:
    tools = load_tool_references(["tether.builtins:calculator", str(EXAMPLES / "weather.py")])
    assert [t.name for t in tools] == ["calculator", "get_weather"]  # type: ignore[union-attr]


def test_a_missing_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.py is not a file"):
        load_tools(str(tmp_path / "nope.py"))


def test_a_file_without_tools_is_a_config_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "empty.py", "def plain(x): return x\n")
    with pytest.raises(ConfigError, match="no module-level tools"):
        load_tools(str(path))


def test_a_file_that_fails_to_run_is_a_config_error_with_its_exception(tmp_path: Path) -> None:
    path = _write(tmp_path, "broken.py", "raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="RuntimeError: boom"):
        load_tools(str(path))


def test_an_attribute_that_is_not_a_tool_says_how_to_make_one(tmp_path: Path) -> None:
    path = _write(tmp_path, "plain.py", "def helper(x): return x\n")
    with pytest.raises(ConfigError, match=r"not a Tool .*@tool"):
        load_tools(f"{path}:helper")
    with pytest.raises(ConfigError, match="has no attribute 'missing'"):
        load_tools(f"{path}:missing")


def test_an_unknown_module_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        load_tools("no_such_module_xyz")
