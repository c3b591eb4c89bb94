"""`tether serve`: the agent of this workspace behind an AG-UI endpoint and a web page
(docs/serve.md). It needs the ``web`` extra (``pip install 'tether[web]'``).

It prints one line, the page's URL with a fresh random token, and serves until Ctrl-C.
The agent is built from tether.toml and the flags as ``tether run`` builds it; its
approvals are deferred to the page (a run that needs a person pauses, stored with its
session), and every run is logged to the session store.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from pathlib import Path
from typing import Any

from tether.cli.common import add_run_flags, error
from tether.errors import ConfigError

DEFAULT_PORT = 8787


def add_cli(sub: Any) -> None:
    serve = sub.add_parser("serve", help="serve a web page (and an AG-UI endpoint) to chat "
                                         "with the agent and approve its calls")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on (127.0.0.1: this machine only). "
                            "Another address lets other machines reach the page: they "
                            "still need the token, and nothing is encrypted (no TLS)")
    # Not dest "port": --local's llama-server port is read from args.port.
    serve.add_argument("--port", dest="serve_port", metavar="PORT", type=_port,
                       default=DEFAULT_PORT,
                       help=f"the port to listen on ({DEFAULT_PORT}; 0 picks a free one)")
    add_run_flags(serve)
    serve.set_defaults(handler=cmd_serve)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port number is needed, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {value}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    _require_web_extra()
    return asyncio.run(_serve(args))


def _require_web_extra() -> None:
    missing = [name for name in ("starlette", "uvicorn", "ag_ui")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"tether serve needs the web extra ({', '.join(missing)} missing): "
                          f"pip install 'tether[web]'")


async def _serve(args: argparse.Namespace) -> int:
    from tether.cli.common import local_serving, make_agent, prepare_local, workspace_of
    from tether.cli.sessions import configured_store
    from tether.run.pending import DeferringApprover
    from tether.serve.app import build_app
    from tether.serve.asking import Elicitations
    from tether.serve.runs import Host, Runs
    from tether.serve.security import exposure, new_token, page_url, served_hosts
    from tether.serve.server import bind, serve

    warning = exposure(args.host)  # refused before anything starts
    prepare_local(args)
    # Each run drives the agent with an approver of its own (tether.serve.asking); the
    # agent's own defers, and asks nobody for input.
    agent, cfg = make_agent(args, approver=DeferringApprover())
    store = configured_store(cfg)
    name, pcfg = cfg.provider_config(getattr(args, "provider", None))
    workspace = Path(workspace_of(args, cfg)).resolve()
    meta = {"provider": name, "model": pcfg.model, "workspace": str(workspace)}
    sock = bind(args.host, args.serve_port)
    port = sock.getsockname()[1]
    token = new_token()
    runs = Runs(Host(agent, store, workspace, Elicitations(), meta))
    app = build_app(runs, token=token, hosts=served_hosts(args.host, port))
    async with local_serving(args), agent:
        if warning is not None:
            error(warning)
        print(page_url(args.host, port, token), flush=True)
        await serve(app, runs, sock)
    error("stopped")
    return 0
