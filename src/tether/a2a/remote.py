"""``A2AAgent``: a remote agent (Agent2Agent protocol) as one tool the parent delegates to.

A sub-agent kind beside ``SubagentProfile``: ``Agent(subagents=[A2AAgent(...)])``, or
``[[a2a]]`` in tether.toml. The tool the model sees is named ``name``, described by the
owner's ``description`` (never by the remote's card: that is the remote's text), and takes
``{"task": string}`` and, to answer a remote that asked for more input, ``continue_task``.

Trust, per answer, as for a sub-agent that could read untrusted text: what the remote says
is outside text (untrusted, shown to the model as data, never traced as the user's words),
unless ``answer_shape`` is declared and this answer parses as the shape; then only its
canonical value crosses, trusted. Its artifacts are outside text. A remote that asks for
input (``input-required``) is answered by the parent's model, through another call of this
tool that the gate judges as any send; never by the person's approver. Whatever the
answer, the conversation counts as having seen untrusted text: nobody knows what the remote
read. The task always leaves the machine (``external_send``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether import events as ev
from tether.display import inline
from tether.errors import A2AError, A2ALimitError, ConfigError
from tether.messages import Usage
from tether.outcome import StopCause
from tether.tools.spec import ToolSpec
from tether.tools.tool import Tool, ToolContext, ToolOutput, json_schema_validator
from tether.trust import AnswerShape, Capabilities, Taint

if TYPE_CHECKING:
    from tether.a2a.wire import Reply

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# What a remote agent can do, as the gate forecasts it: its answer is outside text, and the
# task goes out to it. It holds none of the user's data (only what the task sends it).
REMOTE_CAPABILITIES = Capabilities(untrusted_input=True, external_send=True)


@dataclass(frozen=True)
class A2AAgent:
    """A remote agent speaking the Agent2Agent protocol, delegated to as a sub-agent.

    ``name`` is the tool the parent sees (a verb), ``url`` the agent's base URL (its card is
    read from ``URL/.well-known/agent-card.json``), ``description`` what the parent model is
    told (say when to use it). ``answer_shape`` (``"number"``, ``"boolean"``, ``"date"`` or
    a list of allowed words) offers trust to an answer that parses as it; without it every
    answer is outside text. ``headers`` are sent as they are; ``headers_env`` maps a header
    to the environment variable holding its value, and ``token_env`` names the variable
    holding a bearer token (``Authorization: Bearer ...``), read when a call is made.
    ``timeout_secs`` bounds one call (card, messages, stream) from start to end;
    ``max_bytes`` the bytes read from the remote in one call; ``max_events`` the stream's
    events. A remote past a bound is cut and the call answers an error::

        Agent(model, subagents=[A2AAgent("ask_billing", "https://billing.example",
                                         "Ask the billing agent whether an invoice is paid.",
                                         answer_shape="boolean")])
    """

    name: str
    url: str
    description: str = ""
    answer_shape: AnswerShape | str | list[str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    headers_env: Mapping[str, str] = field(default_factory=dict)
    token_env: str | None = None
    timeout_secs: float = 120.0
    max_bytes: int = 2_000_000
    max_events: int = 1_000

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(f"a2a agent {self.name!r}: name must be 1-64 letters, digits, "
                              "_ or - (it becomes a tool name)")
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"a2a agent {self.name!r}: url must be http:// or https://, "
                              f"not {self.url!r}")
        if self.timeout_secs <= 0 or self.max_bytes <= 0 or self.max_events <= 0:
            raise ConfigError(f"a2a agent {self.name!r}: timeout_secs, max_bytes and "
                              f"max_events must be positive")
        if self.answer_shape is not None:
            try:
                shape = AnswerShape.parse(self.answer_shape)
            except ConfigError as e:
                raise ConfigError(f"a2a agent {self.name!r}: {e}") from None
            object.__setattr__(self, "answer_shape", shape)
        object.__setattr__(self, "headers", dict(self.headers))
        object.__setattr__(self, "headers_env", dict(self.headers_env))

    @property
    def shape(self) -> AnswerShape | None:
        return self.answer_shape if isinstance(self.answer_shape, AnswerShape) else None

    def request_headers(self) -> dict[str, str]:
        """The headers of a call, the environment's values read now. A variable that is
        not set is a ``ConfigError`` naming it (never a request without the credential)."""
        out = dict(self.headers)
        wanted = dict(self.headers_env)
        if self.token_env is not None:
            wanted["Authorization"] = self.token_env
        for header, variable in wanted.items():
            value = os.environ.get(variable)
            if not value:
                raise ConfigError(f"a2a agent {self.name!r}: the environment variable "
                                  f"{variable} (for the {header} header) is not set")
            out[header] = f"Bearer {value}" if header == "Authorization" \
                and variable == self.token_env else value
        return out

    def delegation_tool(self) -> Tool:
        """The tool the parent model calls to delegate to this remote agent."""
        return remote_tool(self)


def remote_tool(agent: A2AAgent) -> Tool:
    schema = {
        "type": "object",
        "properties": {
            "task": {"type": "string",
                     "description": "What the remote agent should do, in full: it sees "
                                    "nothing of this conversation."},
            "continue_task": {"type": "string",
                              "description": "Only to answer a remote agent that asked for "
                                             "more input: the task id it gave."},
        },
        "required": ["task"],
    }
    description = agent.description or (
        f"Delegate a task to the remote agent {agent.name} (Agent2Agent protocol). Its "
        f"answer is outside text.")

    async def delegate(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return await call_remote(agent, arguments["task"], arguments.get("continue_task"),
                                 ctx)

    # The destination is the configured URL, no argument of the call: what the model writes
    # is the content of the send (provenance traces the addresses inside it).
    return Tool(ToolSpec(agent.name, description, schema), delegate, REMOTE_CAPABILITIES,
                json_schema_validator(schema), cache_approval=True, origin="a2a",
                server=agent.name, content_params=("task", "continue_task"))


async def call_remote(agent: A2AAgent, task: str, continue_task: str | None,
                      ctx: ToolContext) -> ToolOutput:
    """Send ``task`` to the remote agent and return what the parent gets, judged per
    answer. Never raises for what the remote does: a failure, a bound or a protocol error
    is an error result the parent model can act on (the run goes on to its ``RunResult``)."""
    from tether.a2a.wire import exchange

    emit = ctx.emit
    if emit is not None:
        await emit(ev.SubagentStarted(ctx.call_id, agent.name, task))
    try:
        reply = await exchange(agent, task, continue_task or None)
    except A2ALimitError as e:
        output, trusted, why = _failed(agent, str(e), outside=False), False, "cut at a bound"
    except A2AError as e:
        output, trusted, why = _failed(agent, str(e), outside=e.from_outside), False, \
            "the exchange failed"
    else:
        output, trusted, why = remote_answer(agent, reply)
    if emit is not None:
        cause = StopCause.ERROR if output.is_error else StopCause.COMPLETED
        await emit(ev.SubagentFinished(ctx.call_id, agent.name, cause, trusted, why,
                                       Usage()))
    return output


# Whatever the remote said, the parent's conversation has now seen what it chose to say.
_EXPOSED = Taint(untrusted=True)


def _failed(agent: A2AAgent, message: str, *, outside: bool) -> ToolOutput:
    return ToolOutput(f"The remote agent {agent.name} failed: {inline(message)}",
                      is_error=True, from_outside=outside, taint=_EXPOSED)


def remote_answer(agent: A2AAgent, reply: Reply) -> tuple[ToolOutput, bool, str]:
    """What the parent gets from a remote's reply: the tool output, whether it is trusted,
    and why. Trusted only when the answer is the reply's one text and parses as the
    declared shape; then only its canonical value crosses."""
    name = agent.name
    if reply.state == "input-required":
        # The remote's question is outside text: the parent's model answers it (or not)
        # with another call, which the gate judges as any send.
        content = (f"The remote agent {name} asks for more input before it goes on (task "
                   f"{reply.task_id}). Its question:\n\n{reply.text}\n\nTo answer, call "
                   f"{name} again with the answer as task and continue_task = "
                   f"\"{reply.task_id}\".")
        return (ToolOutput(content, from_outside=True, taint=_EXPOSED), False,
                "the remote asked for input")
    if reply.state in ("failed", "rejected", "canceled", "auth-required"):
        said = f": {reply.text}" if reply.text.strip() else ""
        what = {"auth-required": "asked for authentication, which tether does not give "
                                 "to a remote agent mid-task"}.get(reply.state,
                                                                    f"ended {reply.state}")
        return (ToolOutput(f"The remote agent {name} {what}{said}", is_error=True,
                           from_outside=True, taint=_EXPOSED), False, f"the task {reply.state}")
    texts = [t for t in (reply.text, *reply.artifacts) if t.strip()]
    if not texts:
        return (ToolOutput(f"The remote agent {name} finished without an answer.",
                           is_error=True, from_outside=False, taint=_EXPOSED), False,
                "no answer")
    shape = agent.shape
    # The shape vouches for a lone answer: artifacts beside it are outside text, and one
    # output has one trust.
    if shape is not None and len(texts) == 1:
        value = shape.canonical(texts[0])
        if value is not None:
            return (ToolOutput(value, from_outside=False, taint=_EXPOSED), True,
                    f"the answer matched the declared shape ({shape.describe()})")
    content = "\n\n".join(texts)
    if shape is not None:
        content += (f"\n\n[tether: this answer is untrusted: it was expected to be "
                    f"{shape.describe(exactly=True)} and nothing else, and it is not]")
        why = f"the answer is not {shape.describe()}"
    else:
        why = "a remote agent's answer is outside text (no answer_shape declared)"
    return ToolOutput(content, from_outside=True, taint=_EXPOSED), False, why


def card_summary(card: Mapping[str, Any]) -> str:
    """One line of what a remote's card says (its name, version, skills), for ``tether
    tools``: the remote's own words, escaped onto one line."""
    skills = ", ".join(str(s.get("name") or s.get("id") or "?")
                       for s in card.get("skills", []) if isinstance(s, Mapping))
    parts = [str(card.get("name", "?"))]
    if card.get("version"):
        parts.append(f"v{card['version']}")
    if card.get("description"):
        parts.append(f"- {card['description']}")
    if skills:
        parts.append(f"(skills: {skills})")
    return inline(" ".join(parts))
