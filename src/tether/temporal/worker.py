"""``tether worker``: serve the ``tether.run`` workflow and its activities for a workspace.

A worker builds everything a run names from its own configuration (tether.toml in its
workspace): the providers, the tools (built-ins, ``[tools] python`` files, MCP servers,
which it starts once and keeps), the sub-agent profiles. Start as many as you like, on as
many machines, on one task queue: Temporal hands each workflow task and activity to one of
them, and moves the work of a worker that dies to the others (docs/scale.md).

::

    python -m tether.temporal.worker [WORKSPACE]     # or: tether worker -w WORKSPACE
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.config.build import agent_from_config
from tether.config.layers import load_config
from tether.config.schema import Config
from tether.errors import ConfigError
from tether.paths import default_blobs

from . import require
from .blobs import BlobStore
from .payloads import canonical, security_to_dict, tool_entry

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.config.schema import ProviderConfig, TemporalSection
    from tether.providers.base import Provider

# The flag values a client may send with a run (what `tether run` flags set); anything
# else is the worker's configuration alone.
_OVERRIDABLE = {"default_provider", "agent", "providers", "tools"}


class WorkerRuntime:
    """What a worker holds for its whole life: its configuration, one agent built from it
    (its tools and providers; its MCP servers started), the blob store, and the factory of
    the host's dependencies its tools are given (``deps``: a durable run does not carry a
    run's ``deps`` through history; each worker builds them)."""

    def __init__(self, workspace: Path, config: Config, agent: Agent, blobs: BlobStore,
                 deps: Callable[[], Any] | None = None) -> None:
        self.workspace = workspace
        self.config = config
        self.agent = agent
        self.blobs = blobs
        self.deps_factory = deps
        self._models: dict[tuple[str, str], Provider] = {}

    def deps(self) -> Any:
        """The dependencies for one tool call: what the factory makes (None without one)."""
        return None if self.deps_factory is None else self.deps_factory()

    @classmethod
    async def start(cls, workspace: str | Path = ".", config: Config | None = None,
                    deps: Callable[[], Any] | None = None) -> WorkerRuntime:
        ws = Path(workspace).resolve()
        cfg = config or load_config(ws)
        # Nobody to ask on a worker: approvals are the workflow's (by signal).
        agent = agent_from_config(ws, config=cfg, approver=None)
        await agent.__aenter__()
        blob_dir = Path(cfg.temporal.blob_dir).expanduser() if cfg.temporal.blob_dir \
            else default_blobs(os.environ)
        if not blob_dir.is_absolute():
            blob_dir = ws / blob_dir
        return cls(ws, cfg, agent, BlobStore(blob_dir), deps)

    async def aclose(self) -> None:
        for provider in self._models.values():
            await provider.aclose()
        await self.agent.aclose()

    # --- what activities ask -------------------------------------------------------------------

    def provider(self, name: str, model: str) -> Provider:
        """The provider ``[providers.NAME]`` builds, asking for ``model``."""
        providers = self.agent.providers
        if name not in providers:
            known = ", ".join(sorted(providers)) or "none"
            raise ConfigError(f"provider {name!r} is not configured on this worker "
                              f"(configured: {known})")
        base = providers[name]
        if model == base.model:
            return base
        made = self._models.get((name, model))
        if made is None:
            with_model = getattr(base, "with_model", None)
            if with_model is None:
                raise ConfigError(f"provider {name!r} cannot switch model to {model!r}")
            made = self._models[(name, model)] = with_model(model)
        return made

    def settings(self, overrides: Mapping[str, Any]) -> Config:
        """The worker's configuration with a run's flag values over it."""
        unknown = sorted(set(overrides) - _OVERRIDABLE)
        tools = overrides.get("tools")
        if isinstance(tools, Mapping):
            unknown += [f"tools.{k}" for k in sorted(set(tools) - {"permission_mode"})]
        if unknown:
            raise ConfigError(f"a run may set default_provider, providers.NAME.model, agent.* "
                              f"and tools.permission_mode; {', '.join(unknown)} belong to the "
                              f"worker's configuration")
        merged = self.config.model_dump()
        _merge(merged, overrides)
        try:
            return Config.model_validate(merged)
        except ValueError as e:
            raise ConfigError(f"the run's settings are invalid: {e}") from None

    def plan(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """What the workflow runs on (see ``workflow.py``): recorded in its history."""
        cfg = self.settings(overrides)
        name, pcfg = cfg.provider_config()
        if cfg.agent.max_cost_usd is not None and pcfg.prices is None:
            raise ConfigError("max_cost_usd needs the model's prices ([providers.NAME.prices] "
                              "in tether.toml)")
        providers = {}
        for pname, p in cfg.providers.items():
            if pname in self.agent.providers:
                providers[pname] = {"wire": self.provider(pname, p.model).name,
                                    "model": p.model, "timeout_secs": _deadline(p)}
        if name not in providers:
            raise ConfigError(f"provider {name!r} is not configured on this worker")
        agent = cfg.agent
        prices = pcfg.prices
        temporal: TemporalSection = cfg.temporal
        return {
            "workspace": str(self.agent.workspace),
            "model": {"provider": name, "model": pcfg.model},
            "providers": providers,
            "agent": {
                "system_prompt": agent.system_prompt, "max_turns": agent.max_turns,
                "max_repeated_failures": agent.max_repeated_failures or None,
                "max_output_tokens": agent.max_output_tokens, "temperature": agent.temperature,
                "permission_mode": cfg.tools.permission_mode,
                "output_retries": agent.output_retries, "max_cost_usd": agent.max_cost_usd,
                "prices": prices.model_dump() if prices is not None else None,
                "tool_timeout_secs": agent.tool_timeout_secs,
            },
            # Every field, as the worker's own agent has them: what a durable run's gate
            # reads is what a run in process here would read.
            "security": security_to_dict(self.agent.security),
            "tools": [tool_entry(t) for t in self.agent.tools.values()],
            "subagents": [s.model_dump() for s in self.config.subagents],
            "temporal": {"heartbeat_timeout_secs": temporal.heartbeat_timeout_secs,
                         "approval_timeout_secs": temporal.approval_timeout_secs,
                         "inline_limit_bytes": temporal.inline_limit_bytes},
        }

    def store_if_large(self, message: Mapping[str, Any], limit: int) -> str | None:
        """Store a message dict by reference when it is at least ``limit`` bytes."""
        data = canonical(message)
        if len(data) < limit:
            return None
        return self.blobs.put(data)


def _deadline(p: ProviderConfig) -> float:
    """How long one model request may take on a worker, its own retries included."""
    return p.timeout_secs * (p.max_retries + 1) + p.retry_after_cap_secs * p.max_retries + 60


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


# --- serving ----------------------------------------------------------------------------------


async def connect(section: TemporalSection) -> Any:
    """A Temporal client for ``[temporal]`` (``address``, ``namespace``)."""
    require()
    from temporalio.client import Client

    from .converter import DATA_CONVERTER

    try:
        return await Client.connect(section.address, namespace=section.namespace,
                                    data_converter=DATA_CONVERTER)
    except RuntimeError as e:  # the SDK's bridge reports a refused connection so
        raise ConfigError(f"cannot reach the Temporal server at {section.address} "
                          f"(namespace {section.namespace!r}): {e}. Start one (`temporal "
                          f"server start-dev`) or set [temporal] address.") from None


async def serve(workspace: str | Path = ".", *, config: Config | None = None,
                task_queue: str | None = None, identity: str | None = None,
                stop: asyncio.Event | None = None,
                ready: Any = None, deps: Callable[[], Any] | None = None) -> None:
    """Serve until ``stop`` is set (or the task is cancelled). ``ready(task_queue)`` is
    called once the worker polls its task queue. ``deps()`` makes the host's dependencies
    each tool call of this worker is given (``ToolContext.deps``): they never travel in a
    workflow's history, so a worker builds its own (return a shared object to share it)."""
    require()
    from temporalio.worker import Worker

    # These import temporalio at their top: loaded once it is known to be installed.
    from .activities import TetherActivities
    from .standins import use_local_tools
    from .workflow import TetherRun, workflow_runner

    cfg = config or load_config(workspace)
    client = await connect(cfg.temporal)
    runtime = await WorkerRuntime.start(workspace, cfg, deps)
    use_local_tools(lambda: runtime.agent.tools)
    stop = stop or asyncio.Event()
    queue = task_queue or cfg.temporal.task_queue
    try:
        worker = Worker(
            client, task_queue=queue,
            workflows=[TetherRun], activities=TetherActivities(runtime).all(),
            workflow_runner=workflow_runner(),
            identity=identity,
            sticky_queue_schedule_to_start_timeout=timedelta(
                seconds=cfg.temporal.sticky_timeout_secs),
            # Ctrl-C lets running activities finish for this long, then cancels them (a
            # cancelled tool call comes back to the model as may-or-may-not-have-run).
            graceful_shutdown_timeout=timedelta(seconds=10))
        async with worker:
            if ready is not None:
                ready(queue)
            await stop.wait()
    finally:
        use_local_tools(None)
        await runtime.aclose()


def main(argv: list[str] | None = None) -> int:
    """``python -m tether.temporal.worker [WORKSPACE]``: serve until SIGINT or SIGTERM."""
    args = sys.argv[1:] if argv is None else argv
    workspace = args[0] if args else "."
    return run_until_signalled(workspace)


def run_until_signalled(workspace: str | Path, task_queue: str | None = None,
                        identity: str | None = None) -> int:
    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)

        def ready(queue: str) -> None:
            print(f"tether worker: serving task queue {queue!r} (Ctrl-C stops)",
                  file=sys.stderr, flush=True)

        await serve(workspace, task_queue=task_queue, identity=identity, stop=stop,
                    ready=ready)

    try:
        asyncio.run(go())
    except ConfigError as e:
        print(f"tether: configuration: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    from tether.temporal import exit_process

    exit_process(main())
