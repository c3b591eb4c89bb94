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
    from tether.cli.common import add_limit_flag

    p = sub.add_parser("logs", help="the recent runs: prompt, answer, how each stopped")
    add_limit_flag(p, 10, "runs")
    p.add_argument("--json", action="store_true", help="the entries as JSON")
    p.set_defaults(handler=cmd_logs)


def entries(store: Any, count: int) -> list[dict[str, Any]]:
    """The latest ``count`` sessions' latest runs, most recent first (0: all)."""
    from tether.cli.common import ALL
    from tether.messages import message_from_dict

    out = []
    for info in store.list(limit=count if count > 0 else ALL):
        record = store.load(info.id)
        prompts = [m for m in (message_from_dict(d) for d in record.messages)
                   if m.role == "user" and m.text.strip()]
        last = record.outcomes[-1] if record.outcomes else {}
        stop = "paused" if info.paused else (info.last_stop or "not finished")
        out.append({
            "id": info.id, "time": datetime.datetime.fromtimestamp(info.updated).isoformat(
                timespec="seconds"),
            "provider": info.provider, "model": info.model,
            "prompt": prompts[-1].text if prompts else info.title,
            "answer": last.get("text") or "", "stop_cause": stop,
            "error": last.get("error"), "runs": len(record.outcomes),
            "messages": info.message_count, "taint": info.taint.to_dict(),
        })
    return out


def cmd_logs(args: argparse.Namespace) -> int:
    from tether.cli.common import fetch_count, say_more, shown_of
    from tether.cli.render import excerpt
    from tether.cli.sessions import store_for, where
    from tether.display import json_dumps, literal

    store = store_for(args.workspace)
    logged, more = shown_of(entries(store, fetch_count(args.limit)), args.limit)
    if args.json:
        print(json_dumps(logged, indent=2))
        if more:
            say_more(len(logged))
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
        print(literal(f"{entry['id']}  {when}  {model}  {entry['stop_cause']}"))
        print(f"  > {excerpt(entry['prompt'], 300)}")
        answer = entry["answer"] or (f"(error: {entry['error']})" if entry["error"] else "")
        if answer:
            print(f"  {excerpt(answer, 300)}")
    if more:
        say_more(len(logged))
    return EXIT_OK


__all__ = ["add_cli", "cmd_logs", "entries"]
