"""Fuzzing config loading: whatever the bytes of tether.toml and the user file, whatever the
TETHER_* variables, ``load_config`` returns a Config or raises ConfigError; nothing else.

Bounded and reproducible: ``derandomize`` draws the same examples on every run, at most
200 of them per property (``deadline=None``: a slow CI machine is not a failure).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.config import Config, load_config
from tether.errors import ConfigError

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """One workspace for every example (a file is rewritten per example)."""
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def load(folder: Path, project: bytes | None = None, user: bytes | None = None,
         env: dict[str, str] | None = None) -> Config | ConfigError:
    """``load_config``'s outcome: a Config, or the ConfigError it raised. Anything else it
    raises fails the property."""
    user_path = folder / "user.toml"
    for path, data in ((folder / "tether.toml", project), (user_path, user)):
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(data)
    try:
        named = str(user_path) if user is not None else os.devnull  # devnull: no user file
        return load_config(folder, env={"TETHER_CONFIG": named, **(env or {})})
    except ConfigError as e:
        assert str(e)  # it says what went wrong
        return e


# --- a TOML writer for generated documents (inline tables, any values TOML can hold) ----------


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(tables: dict[str, Any]) -> str:
    lines = []
    for key, value in tables.items():
        if isinstance(value, dict):
            lines.append(f"[{json.dumps(key)}]")
            lines.extend(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
        else:
            lines.insert(0, f"{json.dumps(key)} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


# Keys tether knows, mixed with unknown ones, so generated documents reach the validation.
KEYS = ["default_provider", "providers", "agent", "tools", "security", "subagents", "mcp",
        "store", "local", "kind", "base_url", "model", "api_key_env", "profile", "max_turns",
        "system_prompt", "timeout_secs", "max_retries", "headers", "prices", "enabled",
        "disabled", "permission_mode", "trifecta", "name", "command", "args", "env", "url",
        "path", "cache_dir", "port", "workspace", "python", "capabilities", "sources",
        "input_per_mtok", "max_cost_usd", "tool_timeout_secs", "zzz", ""]

scalars = st.one_of(
    st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["local", "openai-chat", "ask", "block", "read-only", "\x00", "\ud800",
                     "/tmp/x\x00y", "http://127.0.0.1:1/v1", "9" * 5000]),
    st.datetimes(), st.dates(), st.times(),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5),
    max_leaves=25)
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)


@FUZZ
@given(data=st.binary(max_size=600))
def test_any_bytes_as_tether_toml_load_or_raise_a_config_error(folder: Path,
                                                               data: bytes) -> None:
    load(folder, project=data)


@FUZZ
@given(text=st.text(max_size=300))
def test_any_text_as_tether_toml_loads_or_raises_a_config_error(folder: Path,
                                                                text: str) -> None:
    load(folder, project=text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(project=documents, user=documents)
def test_any_toml_document_in_either_layer_loads_or_raises_a_config_error(
        folder: Path, project: dict[str, Any], user: dict[str, Any]) -> None:
    load(folder, project=toml_document(project).encode("utf-8", "surrogatepass"),
         user=toml_document(user).encode("utf-8", "surrogatepass"))


ENV_NAMES = ["TETHER_PROVIDER", "TETHER_MODEL", "TETHER_BASE_URL", "TETHER_MAX_TURNS",
             "TETHER_PERMISSION_MODE", "TETHER_STORE"]


@FUZZ
@given(env=st.dictionaries(st.sampled_from(ENV_NAMES),
                           st.text(max_size=40) | st.sampled_from(["0", "-1", "9" * 5000,
                                                                   "1_0", "\u0661\u0662"]),
                           max_size=6),
       project=documents)
def test_any_environment_over_any_document_loads_or_raises_a_config_error(
        folder: Path, env: dict[str, str], project: dict[str, Any]) -> None:
    load(folder, project=toml_document(project).encode("utf-8", "surrogatepass"), env=env)


VALID = ('default_provider = "p"\n[providers.p]\nmodel = "m"\n'
         '[agent]\nsystem_prompt = "{prompt}"\n')


# Printable Latin-1: what a legacy editor writes for "café" or "Größe".
LATIN1 = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters='"\\',
                       exclude_categories=["Cc"])


@FUZZ
@given(prompt=st.text(LATIN1, min_size=1, max_size=40))
def test_a_config_in_another_encoding_is_refused_naming_it_or_read_as_utf8(
        folder: Path, prompt: str) -> None:
    text = VALID.replace("{prompt}", prompt)
    for encoding in ("utf-16", "utf-16-le", "utf-16-be"):
        outcome = load(folder, project=text.encode(encoding))
        assert isinstance(outcome, ConfigError) and "UTF-16" in str(outcome)
    data = text.encode("latin-1")
    outcome = load(folder, project=data)
    try:
        as_utf8 = data.decode("utf-8")
    except UnicodeDecodeError:
        assert isinstance(outcome, ConfigError)
        assert "line 5 is not UTF-8" in str(outcome) and "Latin-1" in str(outcome)
    else:  # ASCII, or Latin-1 bytes that happen to spell UTF-8 ("Ã©" is "é")
        assert isinstance(outcome, Config)
        assert outcome.agent.system_prompt == as_utf8.split('"')[-2]
