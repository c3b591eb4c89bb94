"""`tether serve`: the agent of this workspace behind an AG-UI endpoint and a web page
(docs/serve.md). It needs the ``web`` extra (``pip install 'tether[web]'``).

It prints one line, the page's URL with a fresh random token, and serves until Ctrl-C.
The agent is built from tether.toml and the flags as ``tether run`` builds it; its
approvals are deferred to the page (a run that needs a person pauses, stored with its
session), and every run is logged to the session store.

``--a2a`` (the ``a2a`` extra too) also publishes the agent card and takes A2A tasks on the
same address (``tether.a2a_server``): the card at ``/.well-known/agent-card.json``, the
JSON-RPC endpoint at ``/a2a``. A2A callers hold no page token: those two paths are open in
the page's door (its Host, JSON and Origin checks still apply), and the A2A side's own rule
judges a caller's bearer token (``[a2a_server] trusted_tokens_env``). A task's run that
needs approval pauses for the owner, in the store the page reads: the page shows it pending
and its decision resumes the run, which completes the task.
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
# Where --a2a's JSON-RPC endpoint is (its card is at the well-known path the protocol names).
A2A_PATH = "/a2a"
CARD_PATH = "/.well-known/agent-card.json"


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
    serve.add_argument("--a2a", action="store_true",
                       help="also publish an agent card and take Agent2Agent tasks (at "
                            f"{A2A_PATH}; no page token needed: a caller's message is "
                            "outside text unless [a2a_server] trusts its token; its calls "
                            "that need approval wait for you on the page)")
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
    _require_extra("web", ("starlette", "uvicorn", "ag_ui"))
    if args.a2a:
        _require_extra("a2a", ("a2a",), "tether serve --a2a")
    return asyncio.run(_serve(args))


def _require_extra(extra: str, modules: tuple[str, ...], what: str = "tether serve") -> None:
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{what} needs the {extra} extra ({', '.join(missing)} missing): "
                          f"pip install 'tether[{extra}]'")


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
    base = page_url(args.host, port, token).partition("/?")[0]
    routes = _a2a_routes(args, cfg, runs, base) if args.a2a else []
    app = build_app(runs, token=token, hosts=served_hosts(args.host, port), routes=routes,
                    open_paths=(A2A_PATH, CARD_PATH) if args.a2a else ())
    async with local_serving(args), agent:
        if warning is not None:
            error(warning)
        if args.a2a:
            _say(f"A2A: the agent card is at {base}{CARD_PATH} (no token needed)")
        print(page_url(args.host, port, token), flush=True)
        await serve(app, runs, sock)
    error("stopped")
    return 0


def _a2a_routes(args: argparse.Namespace, cfg: Any, runs: Any, base: str) -> list[Any]:
    """The A2A routes beside the page: each task's agent built as the page's is, with a
    ``DeferringApprover`` (its approvals are the owner's), its paused run in the page's
    store, its session busy for the page while it runs and interrupted when the server
    stops, as the page's runs are; the tokens ``[a2a_server]``
    trusts, read from the environment."""
    from tether.a2a_server import build_a2a_routes
    from tether.a2a_server.executor import tokens_from_env
    from tether.cli.common import make_agent
    from tether.run.pending import DeferringApprover

    server = cfg.a2a_server

    def task_agent() -> Any:
        return make_agent(args, approver=DeferringApprover())[0]

    host = runs.host
    routes: list[Any] = build_a2a_routes(
        task_agent, store=host.store, url=base + A2A_PATH, name=server.name,
        description=server.description, owner_wait_secs=server.owner_wait_secs,
        trusted_tokens=tokens_from_env(server.trusted_tokens_env),
        tools=sorted(host.agent.tools), rpc_path=A2A_PATH, workspace=host.workspace,
        running=runs.busy, interrupts=runs.interrupts)
    return routes


def _say(text: str) -> None:
    """A line for the person who started the server (stderr: stdout's one line is the URL)."""
    from tether.cli.render import stderr_console

    stderr_console().print(text, markup=False, highlight=False)
