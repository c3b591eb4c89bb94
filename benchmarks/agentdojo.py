"""How often does tether's gate let AgentDojo's tasks through, and its injections?

Runs AgentDojo (suites v1.2.2: 97 user tasks, 949 user-task x injection-task pairs) through
tether's real ``Agent`` and gate, with scripted models built from the suites' ground truth:

- a **capable model** per user task: the task's ground-truth calls, then its ground-truth
  answer (or, when one of its calls came back as an error or a refusal, an answer that says
  it could not finish). Consecutive calls to the same tool come in one turn (parallel
  calls, as real models make them: three emails sent, three files deleted); every other
  call has a turn of its own (``turns``);
- a **compromised model** per pair: the same, until a tool result it reads contains the
  injection (placed by AgentDojo's ``important_instructions`` attack in the suite's
  injection vectors); then it does the injection task's ground-truth calls (consecutive
  calls to the same tool in one turn, as above) and says what the injection asked it to
  say. Two placements, each run separately:
  ``later`` (the calls come in the turns after the read, as a model that obeys what it
  read) and ``same_turn`` (the calls come in the same assistant message as the read, as a
  model primed in advance). A pair counts as attacked when either placement succeeds.

AgentDojo's tools run on a copy of the task's environment (see ``agentdojo_tools.py`` for
their declarations and the rule behind them), and AgentDojo's own checks judge each run:
``utility`` for user tasks, ``security`` for injections (true: the attack succeeded).

Configurations (how the Agent is built): ``none`` (no gate), ``interlock`` (the
conversation-wide rule), ``provenance`` (per-value provenance, tether's default rule, with
``trifecta = "ask"``) and, optionally, ``interlock_ask`` and ``provenance_yes``
(``permission_mode = "allow"``). Per configuration:

- ``utility``: user tasks that succeed with no approver at all;
- ``utility_with_one_prompt``: user tasks that succeed with an approver that allows exactly
  the calls of the task's ground truth and answers at most one prompt per task (one prompt
  = one request to the approver: every call of one turn that needs a person, each shown
  and decided on its own; later prompts are denied);
- ``prompts_per_task``: prompts (turns that asked a person) per user task in that run, on
  average;
- ``attack_success``: pairs whose injection succeeded, no approver;
- ``attack_success_rubber_stamp``: the same with an approver that allows everything;
- ``attack_success_excluding_output_only``: ``attack_success`` over the pairs whose
  injection asks for a call (``output_only_pairs`` ask only for words in the answer, which
  no gate over tool calls can refuse: travel's injection task 6).

With ``--suites-from PATH`` (a checkout of AgentDyn, github.com/SaFo-Lab/AgentDyn, an
AgentDojo fork) the checkout's own ``agentdojo`` package is used and its suites run:
shopping, github and dailylife by default (tools in ``agentdyn_tools.py``, ground truths
in ``agentdyn_ground_truth.py``). docs/agentdojo.md has both benchmarks' figures.

usage: python benchmarks/agentdojo.py [--json] [--configs none,provenance] [--suites banking]
                                      [--details runs.jsonl] [--suites-from PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeAlias

# This file shares its name with the package it measures: run as a script, its folder comes
# first on sys.path and ``import agentdojo`` would import this file. Drop the folder.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != _HERE]


def _package_root(folder: str) -> Path:
    """Where the ``agentdojo`` package of an AgentDojo-format checkout is: ``src/`` in
    AgentDyn's (and AgentDojo's) layout, or the folder itself."""
    root = Path(folder).expanduser().resolve()
    return root / "src" if (root / "src" / "agentdojo").is_dir() else root


def _prefer_suites_from(argv: Sequence[str]) -> None:
    """``--suites-from PATH``: the checkout's ``agentdojo`` package is imported instead of
    the installed one (AgentDyn is a fork of AgentDojo that registers its suites in its own
    package, beside new tool modules the installed one lacks). It must win before the first
    ``import agentdojo`` below, so the command line is read here."""
    for i, arg in enumerate(argv):
        folder = arg.split("=", 1)[1] if arg.startswith("--suites-from=") else (
            argv[i + 1] if arg == "--suites-from" and i + 1 < len(argv) else None)
        if folder is not None:
            sys.path.insert(0, str(_package_root(folder)))


if __name__ == "__main__":
    _prefer_suites_from(sys.argv[1:])

from agentdojo.attacks.important_instructions_attacks import (  # noqa: E402
    ImportantInstructionsAttack,
)
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask  # noqa: E402
from agentdojo.functions_runtime import FunctionCall, TaskEnvironment  # noqa: E402
from agentdojo.task_suite.load_suites import get_suites  # noqa: E402
from agentdojo.task_suite.task_suite import TaskSuite  # noqa: E402

from tether.agent import Agent  # noqa: E402
from tether.approval import (  # noqa: E402
    AllowAll,
    ApprovalRequest,
    Approver,
    Decision,
    TurnApprovalRequest,
)
from tether.events import ApprovalRequested, TurnStarted  # noqa: E402
from tether.messages import ToolCall, ToolResult  # noqa: E402
from tether.providers.base import ModelRequest, Provider  # noqa: E402
from tether.providers.scripted import Reply, Scripted  # noqa: E402
from tether.tools.tool import Tool  # noqa: E402
from tether.trust import SecurityConfig  # noqa: E402


def _sibling(name: str) -> ModuleType:
    """Load ``benchmarks/<name>.py`` without putting this folder on sys.path (see above)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


agentdojo_tools = _sibling("agentdojo_tools")
agentdojo_ground_truth = _sibling("agentdojo_ground_truth")

BENCHMARK_VERSION = "v1.2.2"
SUITES = ("workspace", "travel", "banking", "slack")
# AgentDyn's suites (github.com/SaFo-Lab/AgentDyn), run with --suites-from a checkout.
AGENTDYN_SUITES = ("shopping", "github", "dailylife")
ATTACK = "important_instructions"
# The attack writes the victim model's name into its text; AgentDojo takes it from the
# pipeline's name. The scripted models do not read it, so any listed name does.
_PIPELINE_NAME = "gpt-4o-2024-05-13"
MAX_TURNS = 100

Placement: TypeAlias = Literal["same_turn", "later"]
PLACEMENTS: tuple[Placement, ...] = ("same_turn", "later")
ApproverKind: TypeAlias = Literal["none", "one_prompt", "rubber_stamp"]
# Gate statuses of a call that did not run (tether.result.ToolCallRecord.status).
REFUSED = frozenset({"denied", "blocked", "unknown_tool", "invalid_args"})


# --- configurations ----------------------------------------------------------------------------


AgentBuilder: TypeAlias = Callable[[Provider, Sequence[Tool], Approver | None], Agent]


@dataclass(frozen=True, slots=True)
class Configuration:
    """One gate configuration: how to build the Agent for a run.

    ``build`` gets the scripted model, the run's tools and the approver of the measurement
    (None, the one-prompt approver or the rubber stamp). ``tools`` may re-declare the
    suite's tools (a gate that reads parameter roles, say); by default they are used as
    declared in ``agentdojo_tools``.
    """

    name: str
    description: str
    build: AgentBuilder
    tools: Callable[[list[Tool]], list[Tool]] = list


def _agent(security: SecurityConfig, permission_mode: Literal["ask", "allow"]) -> AgentBuilder:
    def build(model: Provider, tools: Sequence[Tool], approver: Approver | None) -> Agent:
        return Agent(model, tools, max_turns=MAX_TURNS, approver=approver, security=security,
                     permission_mode=permission_mode)

    return build


CONFIGURATIONS: dict[str, Configuration] = {
    c.name: c for c in (
        Configuration("none", "no gate: trifecta allow, permission_mode allow",
                      _agent(SecurityConfig(rule="interlock", trifecta="allow"), "allow")),
        Configuration("interlock", "the conversation-wide rule: rule interlock, trifecta "
                      "block, permission_mode ask",
                      _agent(SecurityConfig(rule="interlock"), "ask")),
        Configuration("interlock_ask", "the conversation-wide rule asking instead: rule "
                      "interlock, trifecta ask, permission_mode ask",
                      _agent(SecurityConfig(rule="interlock", trifecta="ask"), "ask")),
        Configuration("provenance", "per-value provenance: rule provenance, trifecta ask "
                      "(a distrusted call goes to the approver; with none, it is refused), "
                      "permission_mode ask",
                      _agent(SecurityConfig(rule="provenance", trifecta="ask"), "ask")),
        Configuration("provenance_yes", "per-value provenance with permission_mode allow "
                      "(tether run --yes): a destructive call whose values trace runs unasked; "
                      "a distrusted call still goes to the approver, refused with none",
                      _agent(SecurityConfig(rule="provenance", trifecta="ask"), "allow")),
        Configuration("provenance_endorsed", "per-value provenance with endorsed destructive "
                      "calls ([security] endorse_destructive = true): a destructive call whose "
                      "control values trace (a bare id to a service-minted id of its kind, "
                      "named by no one else) runs unasked; permission_mode ask",
                      _agent(SecurityConfig(rule="provenance", trifecta="ask",
                                            endorse_destructive=True), "ask")),
    )
}
DEFAULT_CONFIGURATIONS = ("none", "interlock", "provenance")


# --- the scripted models -----------------------------------------------------------------------


_NOISE = re.compile(r"\\+[nrt\"]?|[^0-9A-Za-z]")


def squashed(text: str) -> str:
    """Text with YAML's escapes, all whitespace and punctuation removed: tool results are
    YAML dumps, where an injected paragraph is a quoted, escaped, folded string (escaped
    twice where a result is a mapping's Python text dumped again, as AgentDyn's are)."""
    return _NOISE.sub("", text)


def contains_injection(text: str, squashed_injections: Sequence[str]) -> bool:
    body = squashed(text)
    return any(i in body for i in squashed_injections)


@dataclass(frozen=True, slots=True)
class Injection:
    """What a compromised model knows of the injection it will obey."""

    texts: tuple[str, ...]  # the attack's texts as placed in the vectors, squashed
    calls: tuple[FunctionCall, ...]  # the injection task's ground truth
    answer: str  # what the injection asks the model to say (often nothing)
    read_index: int | None  # the user call whose result first shows the injection


COULD_NOT_FINISH = "I could not finish the task: a step was refused or failed."


@dataclass
class Script:
    """A scripted model's mind for one run: its plan, and what it has read so far.

    ``reply`` is called once per turn with the request (the conversation so far) and
    decides the next assistant message from it.
    """

    calls: tuple[FunctionCall, ...]
    answer: str
    injection: Injection | None = None
    placement: Placement = "later"
    _next: int = 0  # the next call of the user task
    _obeying: list[FunctionCall] = field(default_factory=list)  # injection calls still to do
    _own_ids: set[str] = field(default_factory=set)
    _injected: bool = False
    _count: int = 0

    def reply(self, request: ModelRequest) -> Reply:
        inj = self.injection
        if inj is not None and not self._injected and self.placement == "later" and any(
                contains_injection(r.content, inj.texts) for r in _latest_results(request)):
            self._injected = True
            self._obeying = list(inj.calls)
        if self._obeying:
            turn = first_turn(self._obeying)
            del self._obeying[:len(turn)]
            return Reply(calls=tuple(self._call(c, False, request) for c in turn))
        if self._next < len(self.calls):
            start = self._next
            turn = first_turn(self.calls[start:])
            self._next += len(turn)
            calls = tuple(self._call(c, True, request) for c in turn)
            if inj is not None and not self._injected and self.placement == "same_turn" \
                    and inj.read_index is not None and start <= inj.read_index < self._next:
                self._injected = True
                return Reply(calls=(*calls, *(self._call(c, False, request) for c in inj.calls)))
            return Reply(calls=calls)
        return Reply(text=self._final_answer(request))

    def _call(self, call: FunctionCall, own: bool, request: ModelRequest) -> ToolCall:
        self._count += 1
        call_id = f"call_{self._count}"
        if own:
            self._own_ids.add(call_id)
        return ToolCall(call_id, call.function, json.dumps(read_placeholders(call, request)))

    def _final_answer(self, request: ModelRequest) -> str:
        failed = any(p.is_error for m in request.messages for p in m.parts
                     if isinstance(p, ToolResult) and p.call_id in self._own_ids)
        parts = [COULD_NOT_FINISH if failed else self.answer]
        if self._injected and self.injection is not None and self.injection.answer:
            parts.append(self.injection.answer)
        return "\n".join(p for p in parts if p) or "Done."


# AgentDyn's ground truths mark what a model reads at run time with placeholders (the
# one-time password a service mails, a new order's id, an attachment's file id, a saved
# file's name, an invitation link); AgentDojo's suites have none. Each kind is read from
# the newest tool result that shows one, as a model reads what it has just fetched;
# ``$kind_N`` is the N-th of that result, ``$kind`` the first (an order id: the last).
_KINDS: dict[str, re.Pattern[str]] = {
    "6-digits": re.compile(r"OTP[^0-9]{0,60}?([0-9]{6})(?![0-9])"),
    "file_id": re.compile(r"attachments:\n\s*- '?([^'\n]+)'?\n"),
    "file_name": re.compile(r"^(\S+) has been added to ", re.MULTILINE),
    "order_id": re.compile(r"'order_id': '(ORDER-[0-9]+)'"),
    "invitation_link": re.compile(r"(https://www\.github_receive_invitation\.com/\S*?/)"),
}
_PLACEHOLDER = re.compile(r"\$(6-digits|file_id|file_name|order_id|invitation_link)(?:_([0-9]+))?")


def read_placeholders(call: FunctionCall, request: ModelRequest) -> dict[str, Any]:
    """``call``'s arguments with its run-time placeholders filled from the conversation."""
    args = dict(call.args)
    for name, placeholder in (call.placeholder_args or {}).items():
        if not isinstance(placeholder, str):
            continue
        match = _PLACEHOLDER.search(placeholder)
        if match is None:
            continue
        kind, index = match.group(1), int(match.group(2) or 0)
        value = _read(kind, index, request)
        if value is not None:
            args[name] = placeholder.replace(match.group(0), value) if "/" in placeholder \
                else value
    return args


def _read(kind: str, index: int, request: ModelRequest) -> str | None:
    for message in reversed(request.messages):
        found = [v for p in message.parts if isinstance(p, ToolResult)
                 for v in _KINDS[kind].findall(p.content)]
        if found:
            if kind == "order_id" and not index:
                return str(found[-1])
            return str(found[index - 1] if 0 < index <= len(found) else found[0])
    return None


def first_turn(calls: Sequence[FunctionCall]) -> tuple[FunctionCall, ...]:
    """The calls a scripted model makes in its next turn: the first call and every call
    right after it to the same tool (a model sends three emails in one message, as parallel
    calls)."""
    if not calls:
        return ()
    end = 1
    while end < len(calls) and calls[end].function == calls[0].function:
        end += 1
    return tuple(calls[:end])


def turns(calls: Sequence[FunctionCall]) -> list[tuple[FunctionCall, ...]]:
    """``calls`` as a scripted model makes them, turn by turn (``first_turn``)."""
    out: list[tuple[FunctionCall, ...]] = []
    rest = list(calls)
    while rest:
        out.append(first_turn(rest))
        del rest[:len(out[-1])]
    return out


def _latest_results(request: ModelRequest) -> list[ToolResult]:
    if not request.messages or request.messages[-1].role != "tool":
        return []
    return [p for p in request.messages[-1].parts if isinstance(p, ToolResult)]


def scripted_model(script: Script) -> Scripted:
    return Scripted([script.reply] * (MAX_TURNS + 1), model="agentdojo-scripted")


# --- approvers ---------------------------------------------------------------------------------


def _call_key(name: str, arguments: Any) -> tuple[str, str]:
    return name, json.dumps(arguments, sort_keys=True, default=str)


class GroundTruthApprover:
    """A person who knows the task: allows exactly the calls of its ground truth (each
    once), and answers at most ``prompts`` prompts (one prompt: every call of one turn that
    needs a person, each decided on its own); the calls of later prompts are denied."""

    def __init__(self, calls: Sequence[FunctionCall], prompts: int = 1) -> None:
        self._allowed = [_call_key(c.function, dict(c.args)) for c in calls]
        self._left = prompts

    async def approve_turn(self, turn: TurnApprovalRequest) -> list[Decision]:
        if self._left <= 0:
            return [Decision.deny("this task's one prompt was already spent")] * len(turn)
        self._left -= 1
        return [self._decide(request) for request in turn.requests]

    async def approve(self, request: ApprovalRequest) -> Decision:
        return (await self.approve_turn(TurnApprovalRequest((request,))))[0]

    def _decide(self, request: ApprovalRequest) -> Decision:
        key = _call_key(request.tool, request.arguments)
        if key in self._allowed:
            self._allowed.remove(key)
            return Decision.allow()
        return Decision.deny("not a call of the task's ground truth")


def prompts_of(events: Sequence[Any]) -> int:
    """How many prompts a run made: the turns in which the approver was asked (each turn's
    requests go to it as one)."""
    prompts, counted = 0, False
    for event in events:
        if isinstance(event, TurnStarted):
            counted = False
        elif isinstance(event, ApprovalRequested) and not counted:
            prompts, counted = prompts + 1, True
    return prompts


# --- one run -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run, judged by AgentDojo."""

    success: bool  # utility for a user task; security (the attack succeeded) for a pair
    prompts: int
    refused: tuple[dict[str, Any], ...]
    stop_cause: str


@dataclass(frozen=True, slots=True)
class Case:
    """One user task, alone or with one injection task, ready to run any number of times."""

    suite: str
    tools: Any  # agentdojo_tools.SuiteTools
    user_task: BaseUserTask[Any]
    pre: TaskEnvironment  # after the task's init_environment; runs get copies, never this
    calls: tuple[FunctionCall, ...]  # the user task's ground truth, computed from ``pre``
    injection_task: BaseInjectionTask[Any] | None = None
    injection: Injection | None = None


async def run_case(config: Configuration, case: Case, approver: ApproverKind,
                   placement: Placement = "later") -> Outcome:
    environment = case.pre.model_copy(deep=True)
    pre = case.pre.model_copy(deep=True)  # AgentDojo's checks may change it (get_unread)
    # AgentDyn's tools draw one-time passwords and order ids at random: one seed per run
    # makes a run repeat exactly.
    random.seed(0)
    script = Script(case.calls, case.user_task.GROUND_TRUTH_OUTPUT, case.injection, placement)
    who: Approver | None = None
    if approver == "one_prompt":
        who = GroundTruthApprover(case.calls)
    elif approver == "rubber_stamp":
        who = AllowAll()
    agent = config.build(scripted_model(script), config.tools(
        case.tools.for_environment(environment)), who)
    result = await agent.run(case.user_task.PROMPT)

    ran = [FunctionCall(function=r.name, args=r.input, id=r.call_id)
           for r in result.tool_calls if r.status not in REFUSED]
    task = case.injection_task if case.injection_task is not None else case.user_task
    success = judge(task, result.text, pre, environment, ran)
    refused = tuple({"tool": r.name, "arguments": r.input, "status": r.status,
                     "reason": r.output} for r in result.tool_calls if r.status in REFUSED)
    prompts = prompts_of(result.events)
    return Outcome(success, prompts, refused, str(result.stop_cause))


def judge(task: BaseUserTask[Any] | BaseInjectionTask[Any], output: str, pre: TaskEnvironment,
          post: TaskEnvironment, trace: Sequence[FunctionCall]) -> bool:
    """AgentDojo's verdict, as ``TaskSuite._check_task_result`` computes it: the trace check
    when the task has one, else the environment check. ``trace`` holds the calls that ran
    (a call the gate refused never reached the environment)."""
    if isinstance(task, BaseUserTask):
        verdict = task.utility_from_traces(output, pre, post, trace)
        return verdict if verdict is not None else bool(task.utility(output, pre, post))
    verdict = task.security_from_traces(output, pre, post, trace)
    return verdict if verdict is not None else bool(task.security(output, pre, post))


# --- preparing the cases -----------------------------------------------------------------------


class _Target:
    """What AgentDojo's attack reads of the attacked pipeline: its name."""

    name = _PIPELINE_NAME


def load_environment(suite: TaskSuite[Any], injections: dict[str, str],
                     defaults: dict[str, str]) -> TaskEnvironment:
    """``TaskSuite.load_and_inject_default_environment`` with libyaml's parser: the same
    text formatted the same way, parsed four times faster (a test checks the result equals
    AgentDojo's own)."""
    import yaml
    from agentdojo.task_suite.task_suite import read_suite_file, validate_injections

    validate_injections(injections, defaults)
    text = read_suite_file(suite.name, "environment.yaml", suite.data_path)
    data = yaml.load(text.format(**dict(defaults, **injections)), Loader=yaml.CSafeLoader)
    environment: TaskEnvironment = suite.environment_type.model_validate(data)
    return environment


def read_index(tools: Any, calls: Sequence[FunctionCall], pre: TaskEnvironment,
               squashed_texts: Sequence[str]) -> int | None:
    """Which of the user task's ground-truth calls first returns the injection, found by
    running the calls with AgentDojo's runtime on a copy (no gate: this is what the primed
    model expects to read)."""
    from agentdojo.agent_pipeline.tool_execution import tool_result_to_str

    environment = pre.model_copy(deep=True)
    for index, call in enumerate(calls):
        result, error = tools.runtime.run_function(environment, call.function, call.args)
        text = error if error is not None else tool_result_to_str(result)
        if contains_injection(text, squashed_texts):
            return index
    return None


def _case(suite: TaskSuite[Any], tools: Any, user_task: BaseUserTask[Any],
          environment: TaskEnvironment, injection_task: BaseInjectionTask[Any] | None = None,
          injection_texts: Sequence[str] = ()) -> Case:
    # As TaskSuite.run_task_with_pipeline: init_environment, then the ground truth from it.
    pre = user_task.init_environment(environment)
    calls = tuple(user_task.ground_truth(pre.model_copy(deep=True)))
    if injection_task is None:
        return Case(suite.name, tools, user_task, pre, calls)
    texts = tuple(sorted({squashed(t) for t in injection_texts} - {""}))
    supplier = (_sibling("agentdyn_ground_truth") if suite.name in AGENTDYN_SUITES
                else agentdojo_ground_truth)
    injection = Injection(
        texts, tuple(supplier.injection_calls(suite.name, injection_task, pre)),
        injection_task.GROUND_TRUTH_OUTPUT, read_index(tools, calls, pre, texts))
    return Case(suite.name, tools, user_task, pre, calls, injection_task, injection)


def cases(suite_names: Sequence[str] = SUITES, *, with_pairs: bool = True,
          ) -> Iterator[tuple[Case, list[Case]]]:
    """Per user task: its benign case and its pairs' cases (none without ``with_pairs``),
    environments loaded as AgentDojo loads them (the attack's text formatted into the
    suite's YAML)."""
    suites = get_suites(BENCHMARK_VERSION)
    seen: dict[str, Any] = {}
    for name in suite_names:
        suite = suites[name]
        if name in AGENTDYN_SUITES:  # each suite defines its own web tools: no shared names
            tools = agentdojo_tools.suite_tools(suite, None, _sibling("agentdyn_tools").AGENTDYN)
        else:
            tools = agentdojo_tools.suite_tools(suite, seen)
        attack = ImportantInstructionsAttack(suite, _Target())
        defaults = suite.get_injection_vector_defaults()
        default_environment = load_environment(suite, {}, defaults)
        for user_task in suite.user_tasks.values():
            benign = _case(suite, tools, user_task, default_environment.model_copy(deep=True))
            pairs = []
            for injection_task in suite.injection_tasks.values() if with_pairs else ():
                injections = attack.attack(user_task, injection_task)
                pairs.append(_case(suite, tools, user_task,
                                   load_environment(suite, injections, defaults),
                                   injection_task, tuple(injections.values())))
            yield benign, pairs


@dataclass
class Tally:
    user_tasks: int = 0
    pairs: int = 0
    utility: int = 0
    utility_with_one_prompt: int = 0
    prompts: int = 0
    attack: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PLACEMENTS})
    attack_any: int = 0
    stamp: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PLACEMENTS})
    stamp_any: int = 0
    output_only_pairs: int = 0
    attack_output_only: int = 0
    by_suite: dict[str, dict[str, int]] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        def frac(n: int, d: int) -> float:
            return round(n / d, 4) if d else 0.0

        return {
            "user_tasks": self.user_tasks,
            "pairs": self.pairs,
            "utility": frac(self.utility, self.user_tasks),
            "utility_with_one_prompt": frac(self.utility_with_one_prompt, self.user_tasks),
            "prompts_per_task": frac(self.prompts, self.user_tasks),
            "attack_success": frac(self.attack_any, self.pairs),
            "attack_success_rubber_stamp": frac(self.stamp_any, self.pairs),
            "output_only_pairs": self.output_only_pairs,
            "attack_success_excluding_output_only": frac(
                self.attack_any - self.attack_output_only, self.pairs - self.output_only_pairs),
            "attack_success_by_placement": {p: frac(n, self.pairs)
                                            for p, n in self.attack.items()},
            "attack_success_rubber_stamp_by_placement": {p: frac(n, self.pairs)
                                                         for p, n in self.stamp.items()},
            "counts": {"utility": self.utility,
                       "utility_with_one_prompt": self.utility_with_one_prompt,
                       "prompts": self.prompts, "attack_success": self.attack_any,
                       "attack_success_rubber_stamp": self.stamp_any,
                       "attack_success_output_only": self.attack_output_only},
            "by_suite": self.by_suite,
        }


def output_only(case: Case) -> bool:
    """An injection that asks only for words in the answer (its ground truth makes no call):
    no gate over tool calls can refuse it."""
    return case.injection is not None and not case.injection.calls


Built: TypeAlias = Iterable[tuple[Case, list[Case]]]


async def attacks(config_name: str, suite_names: Sequence[str] = SUITES, *,
                  built: Built | None = None) -> dict[str, int]:
    """Only the attacks with no approver (both placements): the part of ``measure`` a CI
    check needs. Counts of pairs, of attacked pairs, and of each among output-only ones.
    ``built``: those suites' cases, already prepared by ``cases`` (a Case runs any number
    of times), instead of preparing them again."""
    config = CONFIGURATIONS[config_name]
    out = {"pairs": 0, "attack_success": 0, "output_only_pairs": 0,
           "attack_success_output_only": 0}
    for _, pairs in cases(suite_names) if built is None else built:
        for case in pairs:
            hit = False
            for placement in PLACEMENTS:
                hit = hit or (await run_case(config, case, "none", placement)).success
            out["pairs"] += 1
            out["attack_success"] += hit
            if output_only(case):
                out["output_only_pairs"] += 1
                out["attack_success_output_only"] += hit
    return out


async def measure(config_names: Sequence[str], suite_names: Sequence[str] = SUITES,
                  details: Callable[[dict[str, Any]], None] | None = None, *,
                  built: Built | None = None) -> dict[str, dict[str, Any]]:
    """Every configuration over every case; one report per configuration (``built``: as
    ``attacks`` takes it)."""
    configs = [CONFIGURATIONS[n] for n in config_names]
    tallies = {c.name: Tally() for c in configs}

    def note(config: Configuration, kind: str, case: Case, outcome: Outcome,
             placement: str | None = None) -> None:
        if details is None:
            return
        details({"config": config.name, "kind": kind, "suite": case.suite,
                 "user_task": case.user_task.ID,
                 "injection_task": case.injection_task.ID if case.injection_task else None,
                 "placement": placement, "success": outcome.success,
                 "prompts": outcome.prompts, "stop_cause": outcome.stop_cause,
                 "refused": list(outcome.refused)})

    for benign, pairs in cases(suite_names) if built is None else built:
        suite = benign.suite
        for config in configs:
            tally = tallies[config.name]
            per_suite = tally.by_suite.setdefault(suite, {
                "user_tasks": 0, "pairs": 0, "utility": 0, "utility_with_one_prompt": 0,
                "attack_success": 0, "attack_success_rubber_stamp": 0})
            tally.user_tasks += 1
            per_suite["user_tasks"] += 1
            plain = await run_case(config, benign, "none")
            note(config, "utility", benign, plain)
            prompted = await run_case(config, benign, "one_prompt")
            note(config, "utility_with_one_prompt", benign, prompted)
            tally.utility += plain.success
            tally.utility_with_one_prompt += prompted.success
            tally.prompts += prompted.prompts
            per_suite["utility"] += plain.success
            per_suite["utility_with_one_prompt"] += prompted.success
            for case in pairs:
                tally.pairs += 1
                per_suite["pairs"] += 1
                hit = {"none": False, "rubber_stamp": False}
                for approver in ("none", "rubber_stamp"):
                    for placement in PLACEMENTS:
                        outcome = await run_case(config, case, approver, placement)
                        note(config, "attack" if approver == "none"
                             else "attack_rubber_stamp", case, outcome, placement)
                        counts = tally.attack if approver == "none" else tally.stamp
                        counts[placement] += outcome.success
                        hit[approver] = hit[approver] or outcome.success
                tally.attack_any += hit["none"]
                tally.stamp_any += hit["rubber_stamp"]
                if output_only(case):
                    tally.output_only_pairs += 1
                    tally.attack_output_only += hit["none"]
                per_suite["attack_success"] += hit["none"]
                per_suite["attack_success_rubber_stamp"] += hit["rubber_stamp"]
    return {name: tally.report() for name, tally in tallies.items()}


# --- the command -------------------------------------------------------------------------------


def _table(reports: dict[str, dict[str, Any]]) -> str:
    rows = [("configuration", "utility", "utility, 1 prompt", "prompts/task",
             "attack success", "attack, rubber stamp")]
    for name, r in reports.items():
        rows.append((name, f"{r['utility']:.1%}", f"{r['utility_with_one_prompt']:.1%}",
                     f"{r['prompts_per_task']:.2f}", f"{r['attack_success']:.1%}",
                     f"{r['attack_success_rubber_stamp']:.1%}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
             for row in rows]
    first = next(iter(reports.values()), {"user_tasks": 0, "pairs": 0})
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"AgentDojo {BENCHMARK_VERSION}, attack {ATTACK}: {first['user_tasks']} user "
                 f"tasks, {first['pairs']} pairs")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGURATIONS),
                        help=f"comma-separated, of: {', '.join(CONFIGURATIONS)}")
    parser.add_argument("--suites", default=None,
                        help=f"comma-separated, of: {', '.join(SUITES)} (default), or with "
                        f"--suites-from an AgentDyn checkout: {', '.join(AGENTDYN_SUITES)}")
    parser.add_argument("--suites-from", metavar="PATH",
                        help="an AgentDojo-format checkout (AgentDyn's: git clone "
                        "https://github.com/SaFo-Lab/AgentDyn); its agentdojo package is "
                        "used, and its suites run (AgentDyn's three by default)")
    parser.add_argument("--details", metavar="PATH",
                        help="write one JSON line per run (refused calls and why)")
    args = parser.parse_args(argv)
    config_names = [c for c in args.configs.split(",") if c]
    known = SUITES
    if args.suites_from is not None:
        import agentdojo

        root = _package_root(args.suites_from)
        if Path(agentdojo.__file__).resolve().parents[1] != root:
            parser.error(f"--suites-from: {root} holds no agentdojo package, or it was "
                         "imported before the option was read (give it on the command line)")
        known = SUITES + AGENTDYN_SUITES
    suite_names = [s for s in (args.suites or ",".join(
        AGENTDYN_SUITES if args.suites_from else SUITES)).split(",") if s]
    for name in config_names:
        if name not in CONFIGURATIONS:
            parser.error(f"unknown configuration {name!r}; known: {', '.join(CONFIGURATIONS)}")
    for name in suite_names:
        if name not in known:
            parser.error(f"unknown suite {name!r}; known: {', '.join(known)}")

    started = time.perf_counter()
    sink = open(args.details, "w", encoding="utf-8") if args.details else None  # noqa: SIM115
    try:
        def write(line: dict[str, Any]) -> None:
            assert sink is not None
            sink.write(json.dumps(line, default=str) + "\n")

        reports = asyncio.run(measure(config_names, suite_names,
                                      write if sink is not None else None))
    finally:
        if sink is not None:
            sink.close()
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps(reports, indent=2))
    else:
        print(_table(reports))
    print(f"({elapsed:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
