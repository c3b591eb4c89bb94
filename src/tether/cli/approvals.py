"""`tether approvals WORKFLOW_ID`: list the calls a durable run (and its sub-agents) waits
on, grouped by turn, or decide one (``--allow N``, ``--allow-session N``, ``--deny N``).
The decision is a signal bound to that call (``tether.temporal.approvals``); a turn runs
once each of its waiting calls is decided."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from tether.cli.temporal import load
from tether.errors import ConfigError


def add_cli(sub: Any) -> None:
    """Register ``tether approvals``."""
    approvals = sub.add_parser("approvals", help="list or decide the calls a durable run "
                                                 "waits on")
    approvals.add_argument("workflow_id", help="the run's workflow id (tether run prints it)")
    choice = approvals.add_mutually_exclusive_group()
    choice.add_argument("--allow", type=int, metavar="N", help="allow pending call #N once")
    choice.add_argument("--allow-session", type=int, metavar="N",
                        help="allow pending call #N's tool for the rest of the run")
    choice.add_argument("--deny", type=int, metavar="N", help="deny pending call #N")
    approvals.add_argument("--reason", help="why (shown to the model on a denial)")
    approvals.set_defaults(handler=cmd_approvals)


def cmd_approvals(args: argparse.Namespace) -> int:
    from tether.temporal import require

    require()
    cfg, _ = load(args)
    return asyncio.run(_approvals(args, cfg))


async def _approvals(args: argparse.Namespace, cfg: Any) -> int:
    from tether.approval import Decision
    from tether.display import inline, json_dumps, literal
    from tether.temporal.client import connect, decide, pending, pending_everywhere, wait_pending

    client = await connect(cfg.temporal)
    position = next((p for p in (args.allow, args.allow_session, args.deny) if p is not None),
                    None)
    if position is None:
        waiting = await pending_everywhere(client, args.workflow_id)
        if not waiting:
            print("nothing waits for a decision")
        # Grouped by turn (a sub-agent's calls wait in its own workflow), each call decided
        # on its own; the turn runs once all of its calls are.
        turns: dict[tuple[str, Any], list[dict[str, Any]]] = {}
        for workflow_id, call in waiting:
            turns.setdefault((workflow_id, call.get("turn")), []).append(call)
        for (workflow_id, _), calls in turns.items():
            print(f"a turn of {inline(workflow_id)} waits on {len(calls)} call(s); decide "
                  f"each with --allow N, --allow-session N or --deny N:")
            for call in calls:
                # One line per call whatever its id, names or explanation hold (a model and
                # a server wrote them): nothing can pose as a line of this listing.
                print(f"  #{inline(call['position'])} "
                      f"{inline(call.get('display_name', call['tool']))} "
                      f"({inline(call['tool'])}, call {inline(call['call_id'])}) in "
                      f"{inline(workflow_id)}: {inline(call.get('explanation', ''))}")
                print(literal("    arguments: " + json_dumps(call["arguments"])))
        return 0
    handle = client.get_workflow_handle(args.workflow_id)
    state = await pending(handle)
    chosen = next((c for c in state["pending"] if c["position"] == position), None)
    if chosen is None:
        shown = ", ".join(f"#{c['position']} {inline(c['tool'])}"
                          for c in state["pending"]) or "none"
        raise ConfigError(f"no call #{position} waits in {args.workflow_id} (waiting: "
                          f"{shown}; a sub-agent's calls wait in its own workflow: list them "
                          f"with `tether approvals {args.workflow_id}`)")
    if args.deny is not None:
        decision = Decision.deny(args.reason or "denied by the user")
    elif args.allow_session is not None:
        decision = Decision.allow_for_session()
    else:
        decision = Decision.allow()
    await decide(handle, chosen, decision)
    # The workflow says whether the signal bound (a signal has no answer of its own).
    after = await wait_pending(handle, state["seq"])
    if len(after["rejected"]) > len(state["rejected"]):
        raise ConfigError(f"the run refused the decision: {inline(after['rejected'][-1])}")
    print(json.dumps({"workflow_id": args.workflow_id, "position": position,
                      "decision": decision.to_dict()}))
    return 0
