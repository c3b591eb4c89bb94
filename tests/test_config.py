"""tether.toml: layering, strict keys, and building an Agent from it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tether.config import INIT_TEMPLATE, agent_from_config, load_config
from tether.errors import ConfigError

NO_USER = {"TETHER_CONFIG": os.devnull}


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_point_at_a_local_llama_server(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, env=NO_USER)
    name, provider = cfg.provider_config()
    assert name == "local"
    assert provider.base_url == "http://127.0.0.1:8080/v1" and provider.profile == "llama-server"
    assert cfg.sources == ["defaults"]


def test_layers_merge_user_then_project_then_env_then_flags(tmp_path: Path) -> None:
    user = write(tmp_path / "user.toml", """
default_provider = "a"
[providers.a]
model = "from-user"
base_url = "http://127.0.0.1:1/v1"
[agent]
max_turns = 5
system_prompt = "user prompt"
""")
    write(tmp_path / "tether.toml", """
[providers.a]
model = "from-project"
[agent]
max_turns = 7
""")
    env = {"TETHER_CONFIG": str(user), "TETHER_MAX_TURNS": "9"}
    cfg = load_config(tmp_path, {"agent": {"system_prompt": "flag prompt"}}, env=env)
    assert cfg.providers["a"].model == "from-project"
    assert cfg.providers["a"].base_url == "http://127.0.0.1:1/v1"  # tables merge deeply
    assert cfg.agent.max_turns == 9
    assert cfg.agent.system_prompt == "flag prompt"
    assert cfg.sources == ["defaults", str(user), str(tmp_path / "tether.toml"), "environment",
                           "flags"]


def test_env_selects_provider_and_model(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, env={**NO_USER, "TETHER_MODEL": "qwen-big"})
    assert cfg.providers["local"].model == "qwen-big"


@pytest.mark.parametrize(("toml", "path"), [
    ("modle = 1", "modle"),
    ("[agent]\nmax_turn = 3", "agent.max_turn"),
    ("[providers.x]\nmodel = 'm'\nbase_uri = 'u'", "providers.x.base_uri"),
    ("[security]\ntrifceta = 'block'", "security.trifceta"),
    ("[[subagents]]\nname = 'a'\ndescription = 'd'\ntool = []", "subagents.0.tool"),
])
def test_unknown_keys_are_rejected_naming_their_path(tmp_path: Path, toml: str,
                                                     path: str) -> None:
    write(tmp_path / "tether.toml", toml)
    with pytest.raises(ConfigError, match=rf"unknown key {path}\b"):
        load_config(tmp_path, env=NO_USER)


@pytest.mark.parametrize(("toml", "suggested"), [
    ("[agent]\nmax_turn = 3", "agent.max_turns"),
    ("[agnet]\nmax_turns = 3", "agent"),
    ("[providers.x]\nmodel = 'm'\nbase_uri = 'u'", "providers.x.base_url"),
    ("[providers.x]\nmodel = 'm'\n[providers.x.prices]\ninput_per_tok = 1",
     "providers.x.prices.input_per_mtok"),
    ("[security]\ntrifceta = 'block'", "security.trifecta"),
    ("[tools]\npermision_mode = 'ask'", "tools.permission_mode"),
    ("[[subagents]]\nname = 'a'\ndescription = 'd'\ntool = []", "subagents.0.tools"),
    ("[[mcp]]\nname = 'a'\ncommand = 'c'\narg = []", "mcp.0.args"),
])
def test_an_unknown_key_spelled_like_a_valid_one_says_which(tmp_path: Path, toml: str,
                                                           suggested: str) -> None:
    write(tmp_path / "tether.toml", toml)
    with pytest.raises(ConfigError, match=rf": did you mean {re.escape(suggested)}\?"):
        load_config(tmp_path, env=NO_USER)


def test_an_unknown_key_like_no_valid_one_suggests_nothing(tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", "[agent]\nzebra = 1\n[providers.p]\nmodel = 'm'\nq = 2\n")
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, env=NO_USER)
    assert "unknown key agent.zebra" in str(raised.value)
    assert "unknown key providers.p.q" in str(raised.value)
    assert "did you mean" not in str(raised.value)


@pytest.mark.parametrize(("variable", "meant"), [
    ("TETHER_MODLE", "TETHER_MODEL"), ("TETHER_MAXTURNS", "TETHER_MAX_TURNS"),
    ("TETHER_BASEURL", "TETHER_BASE_URL"), ("TETHER_PROVIDERS", "TETHER_PROVIDER"),
    ("TETHER_PERMISSIONS", "TETHER_PERMISSION_MODE"), ("TETHER_CACHE", "TETHER_CACHE_DIR"),
])
def test_a_tether_variable_spelled_like_one_tether_reads_is_an_error_naming_it(
        tmp_path: Path, variable: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=rf"{variable} is not one tether reads: did you "
                                          rf"mean {meant}\?"):
        load_config(tmp_path, env={**NO_USER, variable: "x"})


def test_other_tether_variables_are_left_alone(tmp_path: Path) -> None:
    env = {**NO_USER, "TETHER_FUZZ_EXAMPLES": "5", "TETHER_TEST_WORKER": "1",
           "TETHER_E2E_CONTEXT_TURNS": "8", "TETHER_TEST_KEY": "k", "TETHER_STORE": "x.db"}
    assert load_config(tmp_path, env=env).default_provider == "local"


def test_bad_values_say_where(tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", "[security]\ntrifecta = 'maybe'")
    with pytest.raises(ConfigError, match=r"security\.trifecta"):
        load_config(tmp_path, env=NO_USER)


@pytest.mark.parametrize(("toml", "key"), [
    ('[store]\npath = ""', "store.path"),
    ('[store]\npath = "   "', "store.path"),
    ('[tools]\nworkspace = ""', "tools.workspace"),
    ('[tools]\npython = ["mine.py", ""]', "tools.python.1"),
    ('[local]\ncache_dir = ""', "local.cache_dir"),
    ('[local]\nmodel_path = ""', "local.model_path"),
    ('[temporal]\nblob_dir = ""', "temporal.blob_dir"),
])
def test_an_empty_path_is_a_config_error_naming_its_key(tmp_path: Path, toml: str,
                                                        key: str) -> None:
    # "" would be the current folder to pathlib (or silently the default): never what was
    # meant. The user file's value is refused as the project file's is.
    write(tmp_path / "tether.toml", toml)
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}: .*an empty path names no file"):
        load_config(tmp_path, env=NO_USER)
    user = write(tmp_path / "user.toml", toml)
    (tmp_path / "tether.toml").unlink()
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}: .*an empty path"):
        load_config(tmp_path, env={"TETHER_CONFIG": str(user)})


def test_tether_commands_report_an_empty_store_path_without_a_traceback(
        tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", '[store]\npath = ""\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_CONFIG"] = os.devnull
    for args in (["logs"], ["run", "--no-log", "hi"], ["config", "show"]):
        done = subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(tmp_path), *args],
                              capture_output=True, text=True, cwd=tmp_path, env=env,
                              stdin=subprocess.DEVNULL, timeout=60)
        assert done.returncode == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert "store.path" in done.stderr and "an empty path" in done.stderr, done.stderr


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", "this is = = not toml")
    with pytest.raises(ConfigError, match=r"tether\.toml: not valid TOML"):
        load_config(tmp_path, env=NO_USER)


def test_an_unconfigured_provider_says_what_to_add(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, env=NO_USER)
    with pytest.raises(ConfigError, match=r"\[providers.cloud\]"):
        cfg.provider_config("cloud")


def test_the_init_template_is_valid_config(tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", INIT_TEMPLATE)
    cfg = load_config(tmp_path, env=NO_USER)
    assert cfg.default_provider == "local"


def test_agent_from_config_applies_agent_tools_security_and_subagents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    write(tmp_path / "tether.toml", """
[agent]
system_prompt = "Be brief."
max_turns = 6
[tools]
enabled = ["calculator"]
permission_mode = "read-only"
[security]
trifecta = "ask"
[[subagents]]
name = "compute"
description = "Do arithmetic."
tools = ["calculator"]
trusted_output = true
answer_shape = "number"
""")
    agent = agent_from_config(tmp_path)
    assert agent.system_prompt == "Be brief." and agent.max_turns == 6
    assert agent.permission_mode == "read-only"
    assert agent.security.trifecta == "ask"
    assert set(agent.tools) == {"calculator", "compute"}
    assert agent.model.name == "openai-chat" and agent.model.model == "qwen"


def test_subagent_config_errors_surface_at_load(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    write(tmp_path / "tether.toml", """
[[subagents]]
name = "rate"
description = "Rate."
trusted_output = true
""")
    with pytest.raises(ConfigError, match=r"subagent 'rate'.*answer_shape"):
        agent_from_config(tmp_path)


def test_unknown_builtin_tools_are_a_config_error(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    write(tmp_path / "tether.toml", "[tools]\nenabled = ['teleport']")
    with pytest.raises(ConfigError, match="'teleport'"):
        agent_from_config(tmp_path)


def test_tools_python_loads_your_own_tools_relative_to_the_workspace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "tools.py").write_text(
        "from tether import tool\n\n@tool\ndef shout(text: str) -> str:\n"
        "    \"\"\"Shout.\"\"\"\n    return text.upper()\n")
    write(tmp_path / "tether.toml", "[tools]\nenabled = []\npython = ['mine/tools.py']")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    agent = agent_from_config(tmp_path)
    assert set(agent.tools) == {"shout"}


def test_a_tool_passed_in_wins_over_a_configured_one_of_the_same_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether import tool

    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    (tmp_path / "tools.py").write_text(
        "from tether import tool\n\n@tool\ndef shout(text: str) -> str:\n"
        "    \"\"\"Shout.\"\"\"\n    return text.upper()\n")
    write(tmp_path / "tether.toml", "[tools]\nenabled = []\npython = ['tools.py']")

    @tool(name="shout")
    def quiet(text: str) -> str:
        """Whisper."""
        return text.lower()

    agent = agent_from_config(tmp_path, tools=[quiet])
    assert agent.tools["shout"].spec.description == "Whisper."


def test_context_keys_build_the_agents_context_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    write(tmp_path / "tether.toml", """
default_provider = "big"
[providers.big]
base_url = "http://127.0.0.1:1/v1"
model = "big"
context_window = 4096
[providers.small]
base_url = "http://127.0.0.1:2/v1"
model = "small"
context_window = 2048
[agent]
context = "summarize"
context_summarizer = "small"
""")
    agent = agent_from_config(tmp_path)
    assert (agent.context.strategy, agent.context.window) == ("summarize", 4096)
    assert agent.context.summarizer is not None and agent.context.summarizer.model == "small"
    assert agent.context.for_provider("small").window == 2048
    assert agent_from_config(tmp_path, provider="small").context.window == 2048


def test_the_default_context_is_trim_with_the_window_asked_of_the_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    agent = agent_from_config(tmp_path)
    assert (agent.context.strategy, agent.context.window, agent.context.summarizer) == \
        ("trim", None, None)


@pytest.mark.parametrize(("toml", "where"), [
    ("[agent]\ncontext = 'compress'", r"agent\.context"),
    ("[providers.local]\nmodel = 'm'\ncontext_window = 100", r"providers\.local\.context_window"),
    ("[providers.local]\nmodel = 'm'\ncontext_window = 'big'", r"providers\.local\.context_window"),
])
def test_bad_context_values_say_where(tmp_path: Path, toml: str, where: str) -> None:
    write(tmp_path / "tether.toml", toml)
    with pytest.raises(ConfigError, match=where):
        load_config(tmp_path, env=NO_USER)


def test_a_summarizer_that_names_no_provider_is_a_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    write(tmp_path / "tether.toml", "[agent]\ncontext = 'summarize'\ncontext_summarizer = 'tiny'")
    with pytest.raises(ConfigError, match=r"context_summarizer = 'tiny'.*configured: local"):
        agent_from_config(tmp_path)


def test_tether_config_naming_a_missing_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"TETHER_CONFIG names .*nope\.toml.*not a file"):
        load_config(tmp_path, env={"TETHER_CONFIG": str(missing)})
    load_config(tmp_path, env={"TETHER_CONFIG": os.devnull})  # /dev/null: no user file


def test_a_workspace_that_is_not_a_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is not a folder \(-w / --workspace\)"):
        load_config(tmp_path / "missing", env=NO_USER)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is not a folder"):
        load_config(tmp_path / "file", env=NO_USER)


@pytest.mark.parametrize(("entry", "variable", "setting"), [
    ('kind = "anthropic"\nmodel = "c"', "ANTHROPIC_API_KEY",
     "the anthropic default; providers.claude.api_key_env can name another"),
    ('kind = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "c"\n'
     'api_key_env = "MY_KEY_VAR"', "MY_KEY_VAR", "providers.claude.api_key_env names it"),
])
def test_a_missing_key_names_the_provider_the_variable_and_its_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, variable: str,
        setting: str) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    monkeypatch.delenv(variable, raising=False)
    write(tmp_path / "tether.toml", f'default_provider = "claude"\n[providers.claude]\n{entry}\n')
    with pytest.raises(ConfigError) as caught:
        agent_from_config(tmp_path)
    message = str(caught.value)
    assert "provider 'claude'" in message and variable in message and setting in message


def test_a_provider_no_run_uses_needs_no_key(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    write(tmp_path / "tether.toml", 'default_provider = "local"\n'
                                    '[providers.claude]\nkind = "anthropic"\nmodel = "c"\n')
    assert agent_from_config(tmp_path).model.model == "qwen"
