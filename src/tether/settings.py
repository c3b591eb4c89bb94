"""An agent's settings: its bounds, budgets, timeouts, permission mode, prices and how it fits a
conversation into its model's window (``ContextConfig``), one value.

``AgentSettings`` is frozen: an ``Agent`` holds one, a sub-agent's is made from its parent's
with the profile's changes (``dataclasses.replace``), so a setting cannot be forgotten on the
way down. ``Agent(...)``'s keyword arguments build it; ``agent.settings`` is it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar, overload

from tether.approval import PERMISSION_MODES, PermissionMode
from tether.errors import ConfigError
from tether.trust import SecurityConfig

if TYPE_CHECKING:
    from tether.messages import Usage
    from tether.providers.base import Provider

T = TypeVar("T")

# The defaults a person running a small local model would accept (the README says why):
# room for twice a task's turns, and a model stuck repeating a failing call stopped by the
# repeat rule (tether.repeats) at its fourth call, long before the turn bound.
DEFAULT_MAX_TURNS = 20
# Past this many tools a run defers the rest behind search_tools (tether.tools.search).
DEFAULT_DEFER_AFTER = 30
DEFAULT_MAX_REPEATED_FAILURES = 3


ContextStrategy: TypeAlias = Literal["trim", "summarize", "off"]
CONTEXT_STRATEGIES: tuple[ContextStrategy, ...] = ("trim", "summarize", "off")


@dataclass(frozen=True)
class ContextConfig:
    """How an agent fits a conversation into its model's context window.

    - ``strategy``: ``"trim"`` (the default) leaves the oldest turns out, shortening old
      large tool results first; ``"summarize"`` does the same and sends a summary of what
      was left out, written by ``summarizer`` (the agent's own model when None); ``"off"``
      sends the whole conversation (an overflow is then an error).
    - ``window``: the model's context window in tokens; None asks the server (llama-server,
      Ollama, vLLM, LM Studio say) or takes the server profile's default.
    - ``reserve``: tokens kept free for the answer; None: the agent's ``max_output_tokens``,
      else a quarter of the window up to 1,024 (never more than half the window).
    - ``low_water``: the share of the budget a fitting trims down to. Lower trims less
      often (the sent prefix, and a server's prompt cache, stay stable longer).
    - ``windows``: the windows of the agent's other providers by name (for sub-agents).

    ::

        Agent(model, tools, context="summarize")
        Agent(model, tools, context=ContextConfig("trim", window=2048))
    """

    strategy: ContextStrategy = "trim"
    window: int | None = None
    reserve: int | None = None
    low_water: float = 0.6
    summarizer: Provider | None = None
    windows: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.strategy not in CONTEXT_STRATEGIES:
            raise ConfigError(f"context must be one of {', '.join(CONTEXT_STRATEGIES)}, "
                              f"not {self.strategy!r}")
        for name, value in (("window", self.window), *self.windows.items()):
            if value is not None and (not isinstance(value, int) or value < 256):
                raise ConfigError(f"the context window of {name} must be at least 256 "
                                  f"tokens, not {value!r}")
        if self.reserve is not None and self.reserve < 1:
            raise ConfigError(f"the context reserve must be at least 1 token, not "
                              f"{self.reserve!r}")
        if not 0.1 <= self.low_water <= 1.0:
            raise ConfigError(f"context low_water must be between 0.1 and 1, not "
                              f"{self.low_water!r}")

    @classmethod
    def of(cls, value: ContextStrategy | ContextConfig) -> ContextConfig:
        """``value`` as a config: a strategy's name, or a config as it is."""
        return value if isinstance(value, ContextConfig) else cls(value)

    def for_provider(self, name: str | None) -> ContextConfig:
        """The config for a sub-agent on provider ``name`` (None: the agent's own model)."""
        if name is None:
            return self
        return dataclasses.replace(self, window=self.windows.get(name))


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens, for ``max_cost_usd`` and ``RunResult.cost_usd``."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    def cost(self, usage: Usage) -> float:
        """The cost of the tokens ``usage`` knows of (tokens a server did not report are
        not in it: ``Usage.unreported_requests`` says how many requests that leaves out)."""
        return ((usage.input_tokens or 0) * self.input_per_mtok
                + (usage.output_tokens or 0) * self.output_per_mtok) / 1_000_000


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Everything that bounds and governs an agent's runs, checked when it is made.

    - ``max_turns``: model turns per run; ``max_output_tokens``, ``max_cost_usd`` (at
      ``prices``): budgets per run, which cover the usage of the sub-agents it delegates to.
    - ``max_repeated_failures``: how often one call (the same tool, the same arguments) may
      fail in a run: the last failure tells the model not to make it again, and making it
      once more ends the run (``repeated_failure``); ``None`` notices nothing
      (``tether.repeats``).
    - ``permission_mode``: ``ask`` (the approver decides), ``allow`` (gated calls run),
      ``read-only`` (only read-only tools run). ``security``: the trifecta policy and
      the limits on results.
    - ``approval_timeout_secs``, ``tool_timeout_secs``, ``hook_timeout_secs``: how long an
      approver, a tool and a hook (each answer of one: ``tether.run.hooks``) are waited for
      (``None``: for ever). A hook that does not answer in time ends the run.
    - ``system_prompt``, ``temperature``, ``seed`` (sampling's, where the provider takes
      one: its ``takes_seed``): what every request carries; ``output_retries``:
      corrections a structured answer gets; ``workspace``: where the file tools work.
    - ``context``: how a conversation is fitted into the model's window (tether.context).
    - ``defer_after``: past this many tools a run keeps the large catalogue out of its
      requests and offers ``search_tools`` instead (``tether.tools.search``; ``None``: only
      tools marked ``defer`` wait to be found).
    """

    system_prompt: str | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    max_output_tokens: int | None = None
    max_repeated_failures: int | None = DEFAULT_MAX_REPEATED_FAILURES
    max_cost_usd: float | None = None
    prices: Prices | None = None
    permission_mode: PermissionMode = "ask"
    security: SecurityConfig = field(default_factory=SecurityConfig)
    workspace: Path = field(default_factory=Path)
    approval_timeout_secs: float | None = 300.0
    tool_timeout_secs: float | None = 600.0
    temperature: float | None = None
    output_retries: int = 2
    seed: int | None = None
    context: ContextConfig = field(default_factory=ContextConfig)
    hook_timeout_secs: float | None = 30.0
    defer_after: int | None = DEFAULT_DEFER_AFTER

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, not {self.max_turns}")
        if self.max_repeated_failures is not None and self.max_repeated_failures < 1:
            raise ConfigError(f"max_repeated_failures must be at least 1 (or None, to notice "
                              f"nothing), not {self.max_repeated_failures}")
        if self.permission_mode not in PERMISSION_MODES:
            raise ConfigError(
                f"permission_mode must be one of {', '.join(PERMISSION_MODES)}, "
                f"not {self.permission_mode!r}"
            )
        if self.hook_timeout_secs is not None and not self.hook_timeout_secs > 0:
            raise ConfigError(f"hook_timeout_secs must be more than 0 (or None, for ever), "
                              f"not {self.hook_timeout_secs}")
        if self.defer_after is not None and (isinstance(self.defer_after, bool)
                                             or not isinstance(self.defer_after, int)
                                             or self.defer_after < 0):
            raise ConfigError(f"defer_after must be a whole number of tools, 0 or more (or "
                              f"None, to defer only tools marked so), not {self.defer_after!r}")
        if self.max_cost_usd is not None and self.prices is None:
            raise ConfigError("max_cost_usd needs the model's prices (prices=Prices(...), or "
                              "[providers.NAME.prices] in tether.toml)")
        # Resolved once, here: a relative workspace means the directory it was made in.
        object.__setattr__(self, "workspace", Path(self.workspace).resolve())

    def replace(self, **changes: Any) -> AgentSettings:
        """A copy with ``changes``, checked like the original."""
        return dataclasses.replace(self, **changes)


class Setting(Generic[T]):
    """An attribute of the owner that reads (and replaces) one field of its ``settings``:
    ``agent.max_turns`` is ``agent.settings.max_turns``; assigning it makes a new settings
    value (checked as any), never a changed one."""

    name: str

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Setting[T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> T | Setting[T]:
        if obj is None:
            return self
        value: T = getattr(obj.settings, self.name)  # type: ignore[attr-defined]
        return value

    def __set__(self, obj: object, value: T) -> None:
        settings: AgentSettings = obj.settings  # type: ignore[attr-defined]
        obj.settings = settings.replace(**{self.name: value})  # type: ignore[attr-defined]


__all__ = [
    "CONTEXT_STRATEGIES",
    "DEFAULT_MAX_REPEATED_FAILURES",
    "DEFAULT_MAX_TURNS",
    "AgentSettings",
    "ContextConfig",
    "ContextStrategy",
    "Prices",
]
