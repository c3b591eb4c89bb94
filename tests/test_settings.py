"""An agent's settings are one frozen value; a sub-agent's are its parent's with the
profile's changes, so nothing can be forgotten on the way down."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tether import Agent, AgentSettings, Prices, SecurityConfig, SubagentProfile, tool
from tether.errors import ConfigError
from tether.providers import Scripted, call
from tether.tools.tool import ToolContext

PROFILE_CHANGES = {"system_prompt", "max_turns"}


def a_parents_settings(tmp_path: Path) -> AgentSettings:
    """Every field set to something other than its default."""
    return AgentSettings(
        system_prompt="parent prompt", max_turns=7, max_output_tokens=900, max_cost_usd=2.5,
        prices=Prices(1.0, 2.0), permission_mode="read-only",
        security=SecurityConfig(trifecta="ask", max_result_chars=1234), workspace=tmp_path,
        approval_timeout_secs=12.0, tool_timeout_secs=34.0, temperature=0.3,
        output_retries=5, max_repeated_failures=5)


def test_the_defaults_bound_a_run_as_a_person_with_a_local_model_would(tmp_path: Path) -> None:
    from tether.config import INIT_TEMPLATE, load_config

    assert (AgentSettings().max_turns, AgentSettings().max_repeated_failures) == (20, 3)
    agent = Agent(Scripted([]))
    assert (agent.max_turns, agent.max_repeated_failures) == (20, 3)
    assert (load_config(tmp_path).agent.max_turns,
            load_config(tmp_path).agent.max_repeated_failures) == (20, 3)
    (tmp_path / "tether.toml").write_text(INIT_TEMPLATE)
    written = load_config(tmp_path).agent
    assert (written.max_turns, written.max_repeated_failures) == (20, 3)
    assert SubagentProfile("helper", "Help.").max_turns == 12  # the seed's


def test_max_repeated_failures_is_at_least_one_or_none_and_0_in_config_is_off(
        tmp_path: Path) -> None:
    from tether.config import agent_from_config

    with pytest.raises(ConfigError, match="max_repeated_failures must be at least 1"):
        AgentSettings(max_repeated_failures=0)
    assert AgentSettings(max_repeated_failures=None).max_repeated_failures is None
    (tmp_path / "tether.toml").write_text(
        '[providers.local]\nmodel = "m"\n[agent]\nmax_repeated_failures = 0\n')
    assert agent_from_config(tmp_path).max_repeated_failures is None


def test_settings_are_frozen() -> None:
    settings = AgentSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.max_turns = 3  # type: ignore[misc]


def test_the_agents_keyword_arguments_make_its_settings(tmp_path: Path) -> None:
    agent = Agent(Scripted([]), max_turns=7, max_output_tokens=900, temperature=0.3,
                  workspace=tmp_path, permission_mode="allow")
    s = agent.settings
    assert (s.max_turns, s.max_output_tokens, s.temperature, s.permission_mode) == \
        (7, 900, 0.3, "allow")
    assert s.workspace == tmp_path.resolve()
    assert agent.max_turns == 7 and agent.workspace == tmp_path.resolve()


def test_assigning_a_setting_makes_a_new_value_and_leaves_the_old_one_alone() -> None:
    agent = Agent(Scripted([]), max_turns=7)
    before = agent.settings
    agent.max_turns = 3
    assert agent.settings.max_turns == 3 and before.max_turns == 7
    assert agent.settings is not before


def test_a_changed_setting_is_checked_like_a_new_one() -> None:
    agent = Agent(Scripted([]))
    with pytest.raises(ConfigError, match="max_turns"):
        agent.max_turns = 0
    with pytest.raises(ConfigError, match="permission_mode"):
        AgentSettings().replace(permission_mode="yolo")
    with pytest.raises(ConfigError, match="prices"):
        AgentSettings().replace(max_cost_usd=1.0)


def test_an_agent_made_from_settings_has_exactly_them(tmp_path: Path) -> None:
    settings = a_parents_settings(tmp_path)
    agent = Agent.from_settings(Scripted([]), settings)
    assert agent.settings is settings


def test_a_childs_settings_are_the_parents_with_only_the_profiles_changes(
        tmp_path: Path) -> None:
    parent = a_parents_settings(tmp_path)
    profile = SubagentProfile("research", "Research.", system_prompt="child prompt",
                              max_turns=3)
    child = profile.child_settings(parent)
    assert (child.system_prompt, child.max_turns) == ("child prompt", 3)
    for f in dataclasses.fields(AgentSettings):
        if f.name not in PROFILE_CHANGES:
            assert getattr(child, f.name) == getattr(parent, f.name), f.name


async def test_a_child_runs_with_its_parents_settings(tmp_path: Path) -> None:
    seen: list[ToolContext] = []

    @tool
    def where(ctx: ToolContext) -> str:
        """Where am I?"""
        seen.append(ctx)
        return "here"

    child = Scripted([call("where"), "found"])
    parent = Scripted([call("research", task="look"), "done"])
    security = SecurityConfig(max_result_chars=4321)
    agent = Agent(parent, tools=[where], temperature=0.25, workspace=tmp_path,
                  security=security, max_output_tokens=1000,
                  subagents=[SubagentProfile("research", "Research.", tools=["where"],
                                             system_prompt="child prompt",
                                             provider="child")],
                  providers={"child": child})

    result = await agent.run("go")

    assert result.stop_cause == "completed"
    first = child.requests[0]
    assert first.temperature == 0.25 and first.system == "child prompt"
    [ctx] = seen
    assert ctx.workspace == tmp_path.resolve() and ctx.security == security
    assert ctx.run is not None and ctx.run.agent.settings.max_output_tokens == 1000
    assert ctx.run.agent.settings.system_prompt == "child prompt"
