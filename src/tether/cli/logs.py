"""`tether logs`: the recent runs, as the session store logged them.

Every ``tether run`` is logged (a session of its own unless it continued one; ``--no-log``
keeps nothing), as are chats. Each entry is a session's latest run: its id, when, the
model, the prompt, an excerpt of the answer and how the run stopped.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from tether.cli.common import EXIT_OK


def add_cli(sub: Any) -> None:
    """Register ``tether logs``."""
    p = sub.add_parser("logs", help="the recent runs: prompt, answer, how each stopped")
    p.add_argument("-n", "--count", type=_count, default=10, metavar="N",
                   help="how many (10; 0 for all)")
    p.add_argument("--json", action="store_true", help="the entries as JSON")
    p.set_defaults(handler=cmd_logs)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is needed, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (all) or more, not {value}")
    return value


def entries(store: Any, count: int) -> list[dict[str, Any]]:
    """The latest ``count`` sessions' latest runs, most recent first."""
    from tether.messages import message_from_dict

    out = []
    for info in store.list(limit=count if count > 0 else 1_000_000_000):
        record = store.load(info.id)
        prompts = [_own_words(m) for m in (message_from_dict(d) for d in record.messages)
                   if m.role == "user"]
        prompts = [p for p in prompts if p.strip()]
        last = record.outcomes[-1] if record.outcomes else {}
        stop = "paused" if info.paused else (info.last_stop or "not finished")
        out.append({
            "id": info.id, "time": datetime.datetime.fromtimestamp(info.updated).isoformat(
                timespec="seconds"),
            "provider": info.provider, "model": info.model,
            "prompt": prompts[-1] if prompts else info.title,
            "answer": last.get("text") or "", "stop_cause": stop,
            "error": last.get("error"), "runs": len(record.outcomes),
            "messages": info.message_count, "taint": info.taint.to_dict(),
        })
    return out


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
    from tether.cli.sessions import store_for, where
    from tether.display import inline, json_dumps, literal, one_line

    store = store_for(args.workspace)
    logged = entries(store, args.count)
    if args.json:
        print(json_dumps(logged, indent=2))
        return EXIT_OK
    if not logged:
        print(literal(f"no runs logged in {where(store)}"))
        return EXIT_OK
    for n, entry in enumerate(logged):
        if n:
            print()
        model = "/".join(x for x in (entry["provider"], entry["model"]) if x) or "-"
        when = entry["time"].replace("T", " ")
        # Plain lines, never wrapped or styled: prompts, answers and ids came from outside.
        print(f"{inline(entry['id'])}  {literal(when)}  {inline(model)}  "
              f"{inline(entry['stop_cause'])}")
        print(f"  > {one_line(entry['prompt'], 300)}")
        answer = entry["answer"] or (f"(error: {entry['error']})" if entry["error"] else "")
        if answer:
            print(f"  {one_line(answer, 300)}")
    return EXIT_OK


__all__ = ["add_cli", "cmd_logs", "entries"]
