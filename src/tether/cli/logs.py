"""`tether logs`: the recent runs, as the session store logged them.

Every ``tether run`` is logged (a session of its own unless it continued one; ``--no-log``
keeps nothing), as are chats and ``tether batch`` items (a session each, tagged with the
batch). Each entry is a session's latest run: its id, when, the model, the prompt, an
excerpt of the answer (a structured answer's JSON value) and how the run stopped.

- ``-q TEXT`` only the sessions with a message holding TEXT (case-insensitive: a prompt,
  an answer, a tool call or a tool's result), ``-m MODEL`` only those of that model,
  ``--batch ID`` only a batch's items; the store finds them (``SessionStore.list``).
- ``-r`` prints the last answer alone, as ``tether run`` prints one, for scripts.
- ``-u`` adds each run's usage: tokens in and out, and the cost when prices are known.
- ``tether logs ID`` (or ``--conversation ID``) prints that session's conversation: every
  message, whole, with who wrote it. Text that models, tools and servers wrote is printed
  literally (control and escape characters made visible), never styled.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from tether.cli.common import EXIT_ERROR, EXIT_OK


def add_cli(sub: Any) -> None:
    """Register ``tether logs``."""
    p = sub.add_parser("logs", help="the recent runs: prompt, answer, how each stopped")
    from tether.cli.common import add_limit_flag

    add_limit_flag(p, 10, "runs")
    p.add_argument("--json", action="store_true", help="the entries as JSON")
    p.add_argument("id", nargs="?", metavar="ID",
                   help="a session's id (or a unique prefix): print its conversation")
    p.add_argument("--conversation", metavar="ID",
                   help="print this session's conversation (as `tether logs ID`)")
    p.add_argument("-q", "--query", metavar="TEXT",
                   help="only runs whose prompts, answers or tool calls hold TEXT "
                        "(case-insensitive)")
    p.add_argument("-m", "--model", metavar="[PROVIDER:]MODEL",
                   help="only runs with this model")
    p.add_argument("--batch", metavar="ID", help="only the items of this `tether batch`")
    p.add_argument("-r", "--response", action="store_true",
                   help="print the last answer alone (of the runs the filters leave)")
    p.add_argument("-u", "--usage", action="store_true",
                   help="each run's usage: tokens in and out, the cost when known")
    p.set_defaults(handler=cmd_logs)


def entries(store: Any, count: int, *, query: str | None = None, model: str | None = None,
            batch: str | None = None) -> list[dict[str, Any]]:
    """The latest ``count`` sessions' latest runs (0: all), most recent first: only those
    whose messages hold ``query``, of ``model``, of ``batch`` (the store finds them)."""
    from tether.cli.common import ALL

    limit = count if count > 0 else ALL
    filters = {k: v for k, v in (("text", query), ("model", model), ("batch", batch))
               if v is not None}
    return [entry(store.load(info.id)) for info in store.list(limit=limit, **filters)]


def entry(record: Any) -> dict[str, Any]:
    """One session's log entry (its latest run), JSON-ready."""
    from tether.messages import message_from_dict

    info = record.info
    prompts = [_own_words(m) for m in (message_from_dict(d) for d in record.messages)
               if m.role == "user"]
    prompts = [p for p in prompts if p.strip()]
    last = record.outcomes[-1] if record.outcomes else {}
    stop = "paused" if info.paused else (info.last_stop or "not finished")
    return {
        "id": info.id, "time": datetime.datetime.fromtimestamp(info.updated).isoformat(
            timespec="seconds"),
        "provider": info.provider, "model": info.model,
        "prompt": prompts[-1] if prompts else info.title,
        "answer": answer_of(last), "stop_cause": stop,
        "error": last.get("error"), "runs": len(record.outcomes),
        "messages": info.message_count, "taint": info.taint.to_dict(),
        **({"output": last["output"]} if "output" in last else {}),
        "usage": last.get("usage"), "cost_usd": last.get("cost_usd"),
        "batch": info.batch or None, "batch_item": info.batch_item or None,
    }


def answer_of(outcome: dict[str, Any]) -> str:
    """A run's answer as text: its text, or a structured answer's value as JSON."""
    if outcome.get("output") is not None:
        from tether.display import json_dumps

        return json_dumps(outcome["output"], indent=2)
    return str(outcome.get("text") or "")


def _own_words(message: Any) -> str:
    """A user's message as the user wrote it: outside text given with it (piped to
    ``tether run``) is named, not quoted as the prompt."""
    from tether.messages import Text

    words = "".join(p.text for p in message.parts if isinstance(p, Text) and p.origin is None)
    outside = message.outside_sources
    if outside and words.strip():
        return f"{words} (with outside text: {', '.join(outside)})"
    return words


def cmd_logs(args: argparse.Namespace) -> int:
    from tether.cli.sessions import resolve_id, store_for, where
    from tether.display import json_dumps, literal

    store = store_for(args.workspace)
    if args.id and args.conversation and args.id != args.conversation:
        from tether.errors import ConfigError

        raise ConfigError("tether logs ID and --conversation ID both name a session; give one")
    key = args.conversation or args.id
    if key is not None:
        record = store.load(resolve_id(store, key))
        if args.response:
            return _print_answer(entry(record))
        if args.json:
            print(json_dumps(conversation(record), indent=2))
            return EXIT_OK
        _print_conversation(record, usage=args.usage)
        return EXIT_OK
    from tether.cli.common import fetch_count, say_more, shown_of

    logged, more = shown_of(entries(store, 1 if args.response else fetch_count(args.limit),
                                    query=args.query, model=args.model, batch=args.batch),
                            0 if args.response else args.limit)
    if args.response:
        if not logged:
            _say(f"no runs logged in {where(store)}" + _filtered(args))
            return EXIT_ERROR
        return _print_answer(logged[0])
    if args.json:
        print(json_dumps(logged, indent=2))
        if more:
            say_more(len(logged))
        return EXIT_OK
    if not logged:
        print(literal(f"no runs logged in {where(store)}" + _filtered(args)))
        return EXIT_OK
    for n, item in enumerate(logged):
        if n:
            print()
        _print_entry(item, usage=args.usage)
    if more:
        say_more(len(logged))
    return EXIT_OK


def _filtered(args: argparse.Namespace) -> str:
    said = [f"{flag} {value}" for flag, value in (("-q", args.query), ("-m", args.model),
                                                    ("--batch", args.batch)) if value]
    return f" for {' '.join(said)}" if said else ""


def _say(message: str) -> None:
    from tether.cli.common import error

    error(message)


# --- the list -------------------------------------------------------------------------------


def _print_entry(item: dict[str, Any], *, usage: bool) -> None:
    from tether.cli.render import excerpt
    from tether.display import json_dumps, one_line

    model = "/".join(x for x in (item["provider"], item["model"]) if x) or "-"
    when = item["time"].replace("T", " ")
    tag = f"  batch {item['batch']} item {item['batch_item']}" if item["batch"] else ""
    # Plain lines, never wrapped or styled: prompts, answers and ids came from outside.
    print(one_line(f"{item['id']}  {when}  {model}  {item['stop_cause']}{tag}"))
    print(f"  > {excerpt(item['prompt'], 300)}")
    # A structured answer on one line: its JSON, compact (the indented form is -r's).
    answer = (json_dumps(item["output"]) if item.get("output") is not None else item["answer"]) \
        or (f"(error: {item['error']})" if item["error"] else "")
    if answer:
        print(f"  {excerpt(answer, 300)}")
    if usage:
        runs = f" (the last of {item['runs']} runs)" if item["runs"] > 1 else ""
        print(f"  {usage_line(item['usage'], item['cost_usd'])}{runs}")


def usage_line(usage: dict[str, Any] | None, cost: float | None) -> str:
    """``tokens in 95 · out 27 · $0.0012``: what a run used, unknown where the server
    reported nothing (never a made-up 0), the cost when the model's prices are known."""
    from tether.cli.render import tokens
    from tether.messages import usage_from_dict

    if not usage:
        return "usage unknown (the run did not finish)"
    line = tokens(usage_from_dict(usage))
    return line + (f" · {dollars(cost)}" if isinstance(cost, int | float) else " · cost unknown")


def dollars(cost: float) -> str:
    """``$0.0300``; a cost under a cent to its sixth decimal (``$0.000006``), not ``$0.0000``."""
    if cost >= 0.01 or cost == 0:
        return f"${cost:.4f}"
    if cost < 1e-6:
        return "under $0.000001"
    return "$" + f"{cost:.6f}".rstrip("0")


# --- one answer -------------------------------------------------------------------------------


def _print_answer(item: dict[str, Any]) -> int:
    """The answer alone on stdout, as ``tether run`` prints one (control characters made
    visible); a run without one is an error saying how it stopped."""
    from tether.display import literal

    if not item["answer"]:
        why = f"error: {item['error']}" if item["error"] else item["stop_cause"]
        _say(f"the last run of session {item['id']} has no answer ({why})")
        return EXIT_ERROR
    text = item["answer"]
    sys.stdout.write(literal(text) + ("" if text.endswith("\n") else "\n"))
    return EXIT_OK


# --- one conversation -----------------------------------------------------------------------


def conversation(record: Any) -> dict[str, Any]:
    """A session's conversation, JSON-ready: its entry, every message and every run."""
    return {**entry(record), "messages": record.messages, "outcomes": record.outcomes}


def _print_conversation(record: Any, *, usage: bool) -> None:
    from tether.display import one_line
    from tether.messages import Image, ToolCall, ToolResult, message_from_dict
    from tether.trust import untrusted_content

    item = entry(record)
    model = "/".join(x for x in (item["provider"], item["model"]) if x) or "-"
    tag = f" · batch {item['batch']} item {item['batch_item']}" if item["batch"] else ""
    taint = "+".join(k for k, v in item["taint"].items() if v) or "clean"
    # Headers on one line each, and whatever was written inside a message indented under
    # them: a model or tool cannot make its text pass for a header (names and ids came
    # from outside too).
    print(one_line(f"session {item['id']} · {model} · {item['runs']} run(s) · "
                   f"{item['messages']} messages · taint {taint}{tag}"))
    for raw in record.messages:
        message = message_from_dict(raw)
        for part in message.parts:
            print()
            if isinstance(part, ToolCall):
                print(one_line(f"assistant → {part.name} ({part.id})"))
                _block(part.arguments)
            elif isinstance(part, ToolResult):
                flags = [part.call_id]
                if part.is_error:
                    flags.append("error")
                content = part.content
                if part.trust == "untrusted":
                    flags.append("untrusted")
                    # A person reads the data; the notice around it was written for the model.
                    content = untrusted_content(content) or content
                print(one_line(f"tool {part.name} ({', '.join(flags)})"))
                _block(content)
            elif isinstance(part, Image):
                print(one_line(f"{message.role} [image: {part.media_type}]"))
            elif getattr(part, "kind", "") == "text":
                origin = getattr(part, "origin", None)
                if origin is None:
                    print(one_line(message.role))
                    _block(part.text)
                else:  # outside text given with the prompt: not the user's words
                    print(one_line(f"{message.role} (outside text, {origin}: untrusted)"))
                    _block(untrusted_content(part.text.rstrip("\n")) or part.text)
    if record.outcomes:
        print()
        for n, outcome in enumerate(record.outcomes, 1):
            line = f"run {n}: {outcome.get('stop_cause', '?')}"
            if outcome.get("error"):
                line += f" ({outcome['error']})"
            if usage:
                line += f" · {usage_line(outcome.get('usage'), outcome.get('cost_usd'))}"
            print(one_line(line))


def _block(text: str) -> None:
    """``text`` whole (less the newlines that end it), indented by two spaces, literally."""
    from tether.display import literal

    for line in literal(text.rstrip("\n")).split("\n"):
        print(f"  {line}")


__all__ = ["add_cli", "answer_of", "cmd_logs", "conversation", "entries", "entry",
           "usage_line"]
