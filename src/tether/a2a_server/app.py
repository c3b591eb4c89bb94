"""The A2A endpoint's routes and app: the agent card at ``/.well-known/agent-card.json``
and the JSON-RPC endpoint (with streaming) at ``/`` (or ``rpc_path``: ``tether serve
--a2a`` puts it at ``/a2a``, beside the page), from the SDK, around ``TetherExecutor``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableSet, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from tether.a2a_server.executor import ServerRules, TetherExecutor, tokens_from_env
from tether.config.build import agent_from_config
from tether.config.layers import load_config
from tether.run.pending import DeferringApprover
from tether.store.default import default_store_url, open_store
from tether.store.sqlite import default_store_path

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.store.base import SessionStore


def agent_card(url: str, name: str, description: str, tools: Sequence[str]) -> AgentCard:
    """The card tether publishes: JSON-RPC at ``url``, streaming, text in and out, one
    skill naming the tools the agent has (their names only)."""
    return AgentCard(
        name=name, description=description, version="1.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="run", name="run a task", tags=["tether"],
                           description="Runs the task with these tools: "
                                       + (", ".join(tools) or "none"))])


def build_a2a_routes(make_agent: Callable[[], Agent], *, store: SessionStore, url: str,
                     name: str = "tether", description: str = "A tether agent.",
                     trusted_tokens: Sequence[str] = (), owner_wait_secs: float = 3600.0,
                     poll_secs: float = 0.2, tools: Sequence[str] = (),
                     rpc_path: str = "/", workspace: str | Path = "",
                     running: MutableSet[str] | None = None,
                     interrupts: MutableSet[asyncio.Event] | None = None) -> list[BaseRoute]:
    """The A2A routes (card and JSON-RPC) for agents ``make_agent()`` builds, one per task;
    paused runs are stored in ``store`` (their sessions marked with ``workspace``, so the
    workspace's listings show them). ``url`` is where the JSON-RPC endpoint is reached (the
    card says so), ``rpc_path`` its path here. ``trusted_tokens`` are the bearer tokens
    whose callers' messages are the user's words. ``running`` (a set the routes add the
    session of each run in flight to, and take it out of when it ends) and ``interrupts``
    (each run in flight's interrupt event, likewise: setting one ends its run
    ``interrupted``) are shared with another runner of the store's sessions (``tether
    serve``'s page). Mount them in any Starlette app (``tether serve --a2a``)."""
    rules = ServerRules(tuple(trusted_tokens), owner_wait_secs, poll_secs)
    card = agent_card(url, name, description, tools)
    executor = TetherExecutor(make_agent, store, rules, workspace=workspace, running=running,
                              interrupts=interrupts)
    handler = DefaultRequestHandler(agent_executor=executor,
                                    task_store=InMemoryTaskStore(), agent_card=card)
    return [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_path)]


def build_a2a_app(make_agent: Callable[[], Agent], *, store: SessionStore, url: str,
                  **options: Any) -> Starlette:
    """A Starlette app serving ``build_a2a_routes`` (same arguments), e.g. with uvicorn."""
    return Starlette(routes=build_a2a_routes(make_agent, store=store, url=url, **options))


def app_from_config(workspace: str | Path, url: str, *,
                    provider: str | None = None) -> Starlette:
    """The A2A app of a workspace: its tether.toml's agent (one per task, with a
    ``DeferringApprover``: approvals are the owner's), its session store, and its
    ``[a2a_server]`` section (name, description, trusted tokens, how long to wait)."""
    cfg = load_config(workspace)
    server = cfg.a2a_server

    def make_agent() -> Agent:
        return agent_from_config(workspace, config=cfg, provider=provider,
                                 approver=DeferringApprover())

    return build_a2a_app(make_agent, store=_store(cfg.store.url, cfg.store.path), url=url,
                         name=server.name, description=server.description,
                         trusted_tokens=tokens_from_env(server.trusted_tokens_env),
                         owner_wait_secs=server.owner_wait_secs,
                         tools=sorted(make_agent().tools), workspace=Path(workspace).resolve())


def _store(url: str | None, path: str | None) -> SessionStore:
    """The store the CLI uses here (TETHER_STORE_URL or [store] url, else SQLite), so that
    ``tether sessions`` lists and resumes the tasks' paused runs."""
    chosen = default_store_url(url)
    return open_store(url=chosen) if chosen is not None else open_store(
        default_store_path(path))
