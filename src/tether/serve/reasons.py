"""Why a paused call is asked, as data for the approval card: what the page shows a person
before they decide.

For each value of the call's arguments: where it could have come from, traced as the
provenance gate traces (``tether.provenance``) over the texts the model had seen when it
wrote the call: the user's own words, a trusted result, only untrusted text, or no text at
all (the model wrote it); or the tool's own default, which the gate does not hold against
the call. Beside them the conversation's taint, an MCP tool's server and
whether it is trusted, and for ``write_file``/``edit_file`` a diff of what the call would
change. Everything here is data: the page shows every string as text, never as markup.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.builtins.workspace import WorkspaceError, confine
from tether.closed import defaulted_locations, within
from tether.conversation import Conversation, PendingCall
from tether.messages import Message, ToolCall
from tether.provenance import (
    USER_PROMPT,
    Source,
    declared_names,
    located_values,
    sources_of,
    trace,
)
from tether.tools.tool import Tool
from tether.trust import Taint

# A file bigger than this is not read to show a diff (its new text is still shown whole).
DIFF_LIMIT = 1_000_000


def approval_view(call: PendingCall, conversation: Conversation, tool: Tool | None, *,
                  workspace: Path | None, system_prompt: str | None) -> dict[str, Any]:
    """What the approval card of ``call`` shows, JSON-ready: the tool (its title, what it
    can do, whether "allow for the session" is offered), the arguments, the gate's
    explanation, a verdict per value (``values``), the conversation's taint, an MCP tool's
    server, and a diff for a file write or edit."""
    arguments = call.arguments if isinstance(call.arguments, Mapping) else {}
    view: dict[str, Any] = {
        "call_id": call.call_id,
        "position": call.position,
        "tool": call.tool,
        "title": tool.spec.display_name if tool is not None else call.tool,
        "arguments": call.arguments,
        "reason": call.reason,
        "explanation": call.explanation,
        "can_cache": bool(tool is not None and tool.cache_approval),
        "capabilities": tool.capabilities.flags() if tool is not None else [],
        "taint": taint_view(conversation.taint),
        "values": value_verdicts(arguments, tool, _sources_before(
            conversation.messages, call.call_id, system_prompt)),
        "mcp": None,
        "diff": None,
    }
    if tool is not None and tool.origin == "mcp":
        view["mcp"] = {"server": tool.server or "", "trusted": tool.believed}
    if call.tool in ("write_file", "edit_file") and tool is not None:
        view["diff"] = file_diff(call.tool, arguments, workspace)
    return view


def taint_view(taint: Taint) -> dict[str, bool]:
    return {"private": taint.private, "untrusted": taint.untrusted}


def _sources_before(messages: Sequence[Message], call_id: str,
                    system_prompt: str | None) -> tuple[Source, ...]:
    """The texts the model had seen when it wrote the call ``call_id``: every message
    before the (last) assistant message that holds it."""
    end = len(messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant" and any(
                isinstance(p, ToolCall) and p.id == call_id for p in message.parts):
            end = index
            break
    return sources_of(messages[:end], system_prompt)


def value_verdicts(arguments: Mapping[str, Any], tool: Tool | None,
                   sources: Sequence[Source]) -> list[dict[str, Any]]:
    """One entry per string or number of the arguments (keys a schema does not declare
    too), each with its verdict: ``user`` (it occurs in the user's own words), ``trusted``
    (in a trusted result), ``untrusted`` (only in untrusted text), ``model`` (in no text
    the model had seen) or, for one of the last two, ``default`` (the default the tool's
    own schema declares: not the model's choice, ``tether.closed.defaulted_locations``).
    A content parameter's text (a file's content) is not traced: the
    diff shows it, and what it says is the model's to write."""
    names = declared_names(tool.spec.schema_json) if tool is not None else frozenset(arguments)
    defaulted = defaulted_locations(arguments, tool.spec.schema_json) \
        if tool is not None and tool.believed else frozenset()
    out: list[dict[str, Any]] = []
    for name, at, path, leaf in located_values(arguments, names):
        role = tool.parameter_role(name) if tool is not None else "control"
        if role == "content" and isinstance(leaf, str):
            continue
        traced = trace(path, role, leaf, sources, at)
        if USER_PROMPT in traced.trusted_sources:
            verdict = "user"
        elif traced.trusted_sources:
            verdict = "trusted"
        elif within(at, defaulted):
            verdict = "default"
        elif traced.untrusted_sources:
            verdict = "untrusted"
        else:
            verdict = "model"
        out.append({"argument": path, "value": traced.shown, "role": role,
                    "verdict": verdict, "trusted_sources": list(traced.trusted_sources),
                    "untrusted_sources": list(traced.untrusted_sources)})
    return out


def file_diff(tool: str, arguments: Mapping[str, Any],
              workspace: Path | None) -> dict[str, Any] | None:
    """The lines a file write or edit removes and adds: ``{"path", "lines": [[op, text],
    ...]}`` with op ``" "`` (kept), ``"-"`` or ``"+"``; None when the arguments are not
    texts. A write is diffed against the file as it is now (a new file: every line added)."""
    path = arguments.get("path")
    if not isinstance(path, str):
        return None
    if tool == "edit_file":
        old, new = arguments.get("old_text"), arguments.get("new_text")
    else:
        old, new = _current_text(workspace, path), arguments.get("content")
    if not isinstance(old, str) or not isinstance(new, str):
        return None
    return {"path": path, "new_file": tool == "write_file" and old == "",
            "lines": diff_lines(old, new)}


def diff_lines(old: str, new: str) -> list[list[str]]:
    before, after = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    lines: list[list[str]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            lines.extend([" ", line] for line in before[i1:i2])
            continue
        lines.extend(["-", line] for line in before[i1:i2])
        lines.extend(["+", line] for line in after[j1:j2])
    return lines


def _current_text(workspace: Path | None, path: str) -> str:
    """The text of the file a write would replace: "" for a new file, or one that cannot
    be read as UTF-8 text inside the workspace."""
    if workspace is None:
        return ""
    try:
        target = confine(workspace, path).path
        if not target.is_file() or target.stat().st_size > DIFF_LIMIT:
            return ""
        return target.read_bytes().decode("utf-8")
    except (WorkspaceError, OSError, UnicodeDecodeError):
        return ""
