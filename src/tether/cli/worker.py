"""`tether worker`: serve durable runs (Temporal) with this workspace's configuration until
Ctrl-C. The work is ``tether.temporal.worker``'s; see docs/scale.md."""

from __future__ import annotations

import argparse
from typing import Any


def add_cli(sub: Any) -> None:
    """Register ``tether worker``."""
    worker = sub.add_parser("worker", help="serve durable runs (Temporal) with this "
                                           "workspace's providers and tools until Ctrl-C")
    worker.add_argument("--task-queue", help="the task queue to serve ([temporal] task_queue)")
    worker.add_argument("--identity", help="how this worker is named in Temporal")
    worker.set_defaults(handler=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    # No temporalio until the command runs: `import tether.cli` stays light.
    from tether.temporal import require

    require()
    from tether.temporal.worker import run_until_signalled

    return run_until_signalled(args.workspace, args.task_queue, args.identity)
