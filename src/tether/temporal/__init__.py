"""Durable runs on Temporal: tether's own loop in a workflow, its model requests and tool
calls as activities, approvals by signal. An optional extra: ``pip install -e '.[temporal]'``.

::

    # on each worker machine, in a workspace whose tether.toml names providers and tools
    tether worker

    # anywhere that reaches the Temporal server
    tether run --engine temporal "What is 2+3?"
    tether batch IN.jsonl -o OUT.jsonl --engine temporal

From Python, ``tether.temporal.client`` starts runs (``start_run``, ``run``), reads what
waits for approval (``pending``) and decides it (``decide``); ``tether.temporal.batch``
runs a batch. docs/scale.md says what is durable and what is not.

``import tether`` never imports ``temporalio``; the modules of this package that need it
call ``require()`` first, which names the extra when it is missing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from types import ModuleType
from typing import NoReturn

from tether.errors import ConfigError

# Temporal names of the workflow and its activities: the contract between clients and
# workers of any version of this package.
WORKFLOW = "tether.run"
DESCRIBE = "tether.describe"
MODEL = "tether.model"
TOOL = "tether.tool"


def require() -> ModuleType:
    """The ``temporalio`` SDK, or a ConfigError that says how to install it."""
    try:
        import temporalio
    except ImportError:
        raise ConfigError("the Temporal engine needs the temporal extra: pip install -e "
                          "'.[temporal]' (it adds the temporalio SDK)") from None
    return temporalio


__all__ = ["DESCRIBE", "MODEL", "TOOL", "WORKFLOW", "exit_process", "require"]


def exit_process(code: int) -> NoReturn:
    """End this process with ``code``; once temporalio's Rust core has been loaded, without
    finalizing the interpreter, after flushing output and logs.

    The core keeps threads that may still touch the interpreter while it finalizes, which
    aborts a process that has finished its work (temporalio/sdk-python#300: "Fatal Python
    error: PyGILState_Release ... finalizing"). What tether must close (toolsets, telemetry
    exporters, stores, the worker's drain) is closed before a command returns its code."""
    if not any(name.startswith("temporalio.bridge") for name in sys.modules):
        raise SystemExit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    os._exit(code)
