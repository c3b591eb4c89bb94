"""tether's run events as AG-UI events (the ``ag-ui-protocol`` package's models), and what
a ``RunAgentInput`` may say.

A run's stream: ``RUN_STARTED``; the answer as ``TEXT_MESSAGE_START``/``CONTENT``/``END``;
each call as ``TOOL_CALL_START``/``ARGS``/``END`` then ``TOOL_CALL_RESULT`` (its status and
trust in the result's ``metadata["tether"]``); tether's own news as ``CUSTOM`` events
(``tether.taint``, ``tether.notice``, ``tether.elicitation``); ``RUN_FINISHED`` last (its
outcome ``interrupt`` when calls wait for a person, one interrupt per call, or
``cancelled`` when the run was interrupted), or ``RUN_ERROR``.

Of an input only the new user message is the user's words: the last message, when it is a
user message. The history a client sends, system and developer messages, ``state``,
``context``, ``forwardedProps`` and ``tools`` are ignored: the server keeps the
conversation, and nothing a client claims the conversation held becomes the user's.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError

from tether import events as ev
from tether.approval import Decision
from tether.conversation import PendingCall
from tether.display import json_dumps
from tether.errors import TetherError
from tether.messages import Text
from tether.result import RunResult

# The interrupt reason of a call that waits for a person's decision.
APPROVAL_REASON = "tool_approval"
# What a thread id (a tether session id) may be: no path, no markup, not too long.
_THREAD_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A message longer than this is refused (a prompt, not a file).
MAX_PROMPT = 200_000

ENCODER = EventEncoder()


class InputError(TetherError):
    """A ``RunAgentInput`` the server cannot act on (400)."""


def parse_input(body: Any) -> RunAgentInput:
    try:
        given = RunAgentInput.model_validate(body)
    except ValidationError as e:
        raise InputError(f"not a RunAgentInput: {e.error_count()} problem(s), first: "
                         f"{e.errors()[0]['msg']} at {_loc(e.errors()[0]['loc'])}") from None
    if not _THREAD_ID.fullmatch(given.thread_id):
        raise InputError("threadId must be 1 to 64 letters, digits, - or _")
    if not _THREAD_ID.fullmatch(given.run_id):
        raise InputError("runId must be 1 to 64 letters, digits, - or _")
    return given


def _loc(loc: Any) -> str:
    return ".".join(str(p) for p in loc) or "the top"


def new_user_text(given: RunAgentInput) -> str | None:
    """The user's new words: the text of the input's last message when it is a user
    message (its text parts; any other part is refused), else None."""
    if not given.messages:
        return None
    last = given.messages[-1]
    if not isinstance(last, UserMessage):
        return None
    content = last.content
    if isinstance(content, str):
        text = content
    else:
        if not all(isinstance(p, TextPart) for p in content):
            raise InputError("this server takes text messages only (no images or files)")
        text = "\n".join(p.text for p in content if isinstance(p, TextPart))
    if not text.strip():
        raise InputError("the message is empty: say what the agent should do")
    if len(text) > MAX_PROMPT:
        raise InputError(f"the message is over {MAX_PROMPT} characters")
    return text


# --- interrupts: a pending call, and the decision that answers it ---------------------------


def canonical(value: Any) -> str:
    """A call's arguments as one string (sorted keys, no spaces): equal arguments are equal
    strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


def interrupt_id(call: PendingCall) -> str:
    """The id of the interrupt for ``call``: its position, id, tool and exact arguments,
    hashed. A decision names it, so it answers this call and no other (a later call that
    reuses the id, or the same tool with other arguments, has another)."""
    digest = hashlib.sha256(canonical([call.position, call.call_id, call.tool,
                                       call.arguments]).encode()).hexdigest()
    return f"approval-{digest[:32]}"


def interrupt_of(call: PendingCall, view: Mapping[str, Any]) -> Interrupt:
    """The AG-UI interrupt of a pending call; ``view`` (``tether.serve.reasons``) is in its
    metadata for the approval card, and its response schema says what a decision is."""
    choices = ["allow", "deny"] + (["allow_session"] if view.get("can_cache") else [])
    return Interrupt(
        id=interrupt_id(call), reason=APPROVAL_REASON, message=call.explanation,
        tool_call_id=call.call_id,
        response_schema={"type": "object", "required": ["decision"], "properties": {
            "decision": {"enum": choices}, "reason": {"type": "string"}}},
        metadata={"tether": dict(view)})


def decisions_of(given: RunAgentInput, calls: list[PendingCall],
                 cacheable: Mapping[str, bool]) -> dict[PendingCall, Decision]:
    """The decision of each resume entry, bound to the pending call whose interrupt it
    answers. Refused (``InputError``): an entry for no pending call (decided already, or
    its arguments changed), two for one call, a call left without a decision, an unknown
    decision, "allow for the session" where the tool does not offer it, and arguments in a
    payload that differ from the call's (an edited call is a new call: the model makes it,
    and it passes the gate again)."""
    by_id = {interrupt_id(c): c for c in calls}
    out: dict[PendingCall, Decision] = {}
    for entry in given.resume or ():
        call = by_id.get(entry.interrupt_id)
        if call is None:
            raise InputError(f"no pending call has interrupt {entry.interrupt_id[:80]!r}: it "
                             f"was decided already, or is not this session's")
        if call in out:
            raise InputError(f"two decisions answer call {call.call_id[:80]!r}")
        out[call] = _decision(call, entry.status, entry.payload, cacheable.get(call.tool))
    missing = [c.call_id for c in calls if c not in out]
    if missing:
        raise InputError(f"every pending call needs a decision; none for "
                         f"{', '.join(repr(m[:80]) for m in missing)}")
    return out


def _decision(call: PendingCall, status: str, payload: Any, can_cache: bool | None
              ) -> Decision:
    if status == "cancelled":
        return Decision.deny("the user dismissed the request")
    if not isinstance(payload, Mapping):
        raise InputError("a decision's payload is an object: {\"decision\": \"allow\" | "
                         "\"allow_session\" | \"deny\", \"reason\": \"...\"}")
    if "arguments" in payload and canonical(payload["arguments"]) != canonical(call.arguments):
        raise InputError(f"the decision for {call.call_id[:80]!r} carries other arguments: an "
                         f"edited call is not approved by a decision; ask the agent for the "
                         f"call you want, and it passes the gate again")
    word, reason = payload.get("decision"), payload.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise InputError("a decision's reason is text")
    if word == "allow":
        return Decision.allow()
    if word == "allow_session":
        if not can_cache:
            raise InputError(f"{call.tool[:80]!r} cannot be allowed for the session; allow "
                             f"it once")
        return Decision.allow_for_session()
    if word == "deny":
        return Decision.deny(" ".join((reason or "").split())[:500] or "the user said no")
    raise InputError("decision is one of allow, allow_session, deny")


# --- the run's events -----------------------------------------------------------------------


@dataclass
class Translator:
    """Turns one run's tether events into AG-UI events (top-level events only: a
    sub-agent's work shows as the call that started it)."""

    thread_id: str
    run_id: str
    _message: str | None = None  # the id of the answer being streamed
    _streamed: bool = False
    _results: dict[str, str] = field(default_factory=dict)

    def started(self) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                protocol_version="1.0")]

    def __call__(self, event: ev.Event) -> list[BaseEvent]:
        if event.path:
            return []
        if isinstance(event, ev.TextDelta):
            return self._text(event.text)
        if isinstance(event, ev.ModelResponded):
            return self._responded(event)
        if isinstance(event, ev.ToolCallRequested):
            call = event.call
            return [ToolCallStartEvent(tool_call_id=call.id, tool_call_name=call.name,
                                       parent_message_id=self._message),
                    ToolCallArgsEvent(tool_call_id=call.id, delta=call.arguments),
                    ToolCallEndEvent(tool_call_id=call.id)]
        if isinstance(event, ev.ToolFinished):
            return [self._result(event)]
        if isinstance(event, ev.TaintChanged):
            return [CustomEvent(name="tether.taint", value={
                "private": event.after.private, "untrusted": event.after.untrusted,
                "cause": event.cause})]
        if isinstance(event, ev.Notice):
            return [CustomEvent(name="tether.notice", value={
                "level": event.level, "message": event.message, "source": event.source})]
        return []

    def _text(self, text: str) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self._message is None:
            self._message = uuid.uuid4().hex
            out.append(TextMessageStartEvent(message_id=self._message, role="assistant"))
        self._streamed = True
        if text:
            out.append(TextMessageContentEvent(message_id=self._message, delta=text))
        return out

    def _responded(self, event: ev.ModelResponded) -> list[BaseEvent]:
        """The end of the model's answer: the text not streamed (a server that answered
        whole) is sent whole, and the message ends."""
        out: list[BaseEvent] = []
        text = "".join(p.text for p in event.message.parts if isinstance(p, Text))
        if not self._streamed and text:
            out.extend(self._text(text))
        if self._message is not None:
            out.append(TextMessageEndEvent(message_id=self._message))
        self._message, self._streamed = None, False
        return out

    def _result(self, event: ev.ToolFinished) -> BaseEvent:
        result = event.result
        return ToolCallResultEvent(
            message_id=uuid.uuid4().hex, tool_call_id=event.call_id, role="tool",
            content=result.content,
            metadata={"tether": {"status": event.status, "tool": event.tool,
                                 "trust": result.trust}})

    def finished(self, result: RunResult, interrupts: list[Interrupt]) -> list[BaseEvent]:
        """The run's last event: ``RUN_ERROR`` for a failed run, else ``RUN_FINISHED`` with
        its outcome (``interrupt`` with ``interrupts`` when paused)."""
        out: list[BaseEvent] = []
        if self._message is not None:  # an answer cut short (interrupted)
            out.append(TextMessageEndEvent(message_id=self._message))
            self._message = None
        cause = str(result.stop_cause)
        if result.error is not None:
            out.append(RunErrorEvent(message=str(result.error), code=type(result.error).__name__))
            return out
        data = {"stop_cause": cause, "text": result.text,
                "taint": {"private": result.taint.private, "untrusted": result.taint.untrusted}}
        outcome: Any
        if cause == "paused" and interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
        elif cause == "interrupted":
            outcome = RunFinishedCancelledOutcome()
        else:
            outcome = RunFinishedSuccessOutcome()
        out.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                    result=data, outcome=outcome))
        return out


def encoded(event: BaseEvent) -> str:
    """One event as an SSE frame (the package's encoder)."""
    return ENCODER.encode(event)


def error_frame(message: str, code: str) -> str:
    return encoded(RunErrorEvent(message=message, code=code))


def custom(name: str, value: Any) -> BaseEvent:
    return CustomEvent(name=name, value=json.loads(json_dumps(value)))
