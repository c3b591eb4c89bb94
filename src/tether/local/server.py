"""A local model on 127.0.0.1: start llama-server, wait until it is ready, stop it cleanly.

``LocalServer`` is what tests and ``tether run --local`` use; ``tether local setup`` and
``tether local serve`` are the commands. Building the server and fetching the model live in
``tether.local.setup``.

::

    async with LocalServer(port=0) as server:       # port 0: any free port
        model = OpenAIChat(server.base_url, "qwen", profile="llama-server")
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import LocalSetupError
from tether.local.setup import (
    DEFAULT_MODEL,
    Progress,
    check_gguf,
    default_cache_dir,
    default_model_path,
    is_set_up,
    model_problem,
    server_binary_path,
    setup,
)

if TYPE_CHECKING:
    pass

HOST = "127.0.0.1"
ALIAS = "qwen"  # the model name llama-server answers to; the default config asks for it

# The README's advice for the small default model: after a tool result it tends to call
# the tool again, or to answer in JSON, unless told plainly to answer in words.
SYSTEM_PROMPT = ("When a tool result is given, answer the user's question in one plain "
                 "sentence using it. Never output JSON.")


def bundled_chat_template() -> Path:
    """The chat template shipped with tether for the default model.

    It is Qwen2.5's own template (Apache-2.0, the Qwen team) with the ``<tool_call>`` tags
    removed: the 0.5B model writes its calls as bare JSON, and with the stock template
    llama-server returns them as text instead of ``tool_calls``.
    """
    path = resources.files("tether.local") / "data" / "qwen25-bare.jinja"
    # An installed package (wheel or editable) keeps its data files on disk.
    return Path(str(path))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _port_is_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


# llama-server's health answer is a few bytes of JSON; more is not read.
HEALTH_MAX_BYTES = 64 * 1024


async def health(port: int, *, timeout: float = 2.0) -> str | None:
    """``ok``, ``loading``, another status word, or None when nothing answers on ``port``."""
    import httpx

    from tether.providers.http.bodies import ResponseTooLarge, decode_json, read_body

    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client, \
                client.stream("GET", f"http://{HOST}:{port}/health") as response:
            body = await read_body(response, HEALTH_MAX_BYTES)
    except httpx.HTTPError:
        return None
    except ResponseTooLarge:
        body = b""  # something answers, but not llama-server's health check
    try:
        status = decode_json(body).get("status")
    except (ValueError, AttributeError):
        status = None
    if response.status_code == 200:
        return str(status or "ok")
    return "loading" if response.status_code == 503 else str(status or response.status_code)


@dataclass(frozen=True)
class ServerCommand:
    """The llama-server command line, kept as data so it can be shown and tested.

    With ``models_dir`` it is llama-server's router: no model of its own, each GGUF of the
    folder loaded on demand by the name a request asks for (its file name without
    ``.gguf``), at most ``models_max`` at once, each instance with these settings."""

    binary: Path
    model: Path
    port: int
    chat_template: Path | None
    context: int = 4096
    threads: int | None = None
    alias: str = ALIAS
    models_dir: Path | None = None
    models_max: int = 2
    # The router's per-model settings (an INI file): the bundled template for the default
    # model, which needs it to call tools (``router_preset``).
    models_preset: Path | None = None

    def argv(self) -> list[str]:
        if self.models_dir is not None:
            served = ["--models-dir", str(self.models_dir), "--models-max",
                      str(self.models_max)]
            if self.models_preset is not None:
                served += ["--models-preset", str(self.models_preset)]
        else:
            served = ["-m", str(self.model), "--alias", self.alias]
        args = [str(self.binary), *served,
                "--host", HOST, "--port", str(self.port), "-c", str(self.context),
                # One slot: runs are deterministic at temperature 0 and use all the threads.
                "-np", "1", "-t", str(self.threads or os.cpu_count() or 2),
                # --jinja applies the model's chat template with tool support; the prompt
                # cache in RAM is off (it only helps long multi-user sessions).
                "--jinja", "--cache-ram", "0"]
        if self.chat_template is not None:
            args += ["--chat-template-file", str(self.chat_template)]
        return args


class LocalServer:
    """llama-server as an async context manager: ``start()`` sets up what is missing
    (unless ``auto_setup=False``), launches the server in its own process group and waits
    for ``/health``; ``stop()`` terminates the group and waits for it.

    - ``model``: a GGUF of your own; None is the pinned default model (then the bundled chat
      template is used; a model of your own uses its built-in template unless
      ``chat_template`` names one).
    - ``port``: 0 picks a free port.
    - ``ready_timeout``: how long loading may take before it is an error.
    """

    def __init__(
        self,
        *,
        model: str | Path | None = None,
        port: int = 8080,
        cache_dir: str | Path | None = None,
        chat_template: str | Path | None = None,
        context: int = 4096,
        threads: int | None = None,
        ready_timeout: float = 120.0,
        auto_setup: bool = True,
        progress: Progress | None = None,
        models_dir: str | Path | None = None,
        models_max: int = 2,
    ) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.model = Path(model).expanduser() if model else default_model_path(self.cache_dir)
        self.port = port or free_port()
        if chat_template is not None:
            self.chat_template: Path | None = Path(chat_template)
        else:
            self.chat_template = None if model else bundled_chat_template()
        self.context = context
        self.threads = threads
        self.ready_timeout = ready_timeout
        self.auto_setup = auto_setup
        self._own_model = model is not None
        self.progress = progress
        self.log_path = self.cache_dir / "logs" / f"llama-server-{self.port}.log"
        self.models_dir = Path(models_dir).expanduser() if models_dir else None
        self.models_max = models_max
        self.models_preset: Path | None = None
        self._process: asyncio.subprocess.Process | None = None
        self.ready_seconds: float | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def command(self) -> ServerCommand:
        return ServerCommand(server_binary_path(self.cache_dir), self.model, self.port,
                             self.chat_template, self.context, self.threads,
                             models_dir=self.models_dir, models_max=self.models_max,
                             models_preset=self.models_preset)

    async def start(self) -> None:
        if self._process is not None:
            raise LocalSetupError("this LocalServer is already running")
        if self.models_dir is not None:
            # The router loads the folder's models itself; each is checked before it starts.
            names = await asyncio.to_thread(router_models, self.models_dir)
            if self.chat_template is not None and not self._own_model:
                self.chat_template = None  # the bundled template is the default model's
            self.models_preset = router_preset(
                names, self.cache_dir / "logs" / f"router-presets-{self.port}.ini")
        if not is_set_up(self.cache_dir, self.model if self._own_model else None):
            if not self.auto_setup:
                raise LocalSetupError(f"llama-server or the model is not set up in "
                                      f"{self.cache_dir}; run `tether local setup`")
            # Building takes minutes and blocks: off the event loop.
            await asyncio.to_thread(setup, cache_dir=self.cache_dir,
                                    model=self.model if self._own_model else None,
                                    progress=self.progress)
        if self.chat_template is not None and not self.chat_template.is_file():
            raise LocalSetupError(f"chat template {self.chat_template} does not exist")
        if _port_is_open(self.port):
            raise LocalSetupError(f"port {self.port} on {HOST} is already in use; stop what "
                                  f"listens there or choose another port (--port)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            # Its own session (process group), so a Ctrl-C meant for tether does not kill
            # it mid-answer, and stop() can end it and anything it spawned together.
            self._process = await asyncio.create_subprocess_exec(
                *self.command().argv(), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent())
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        self.ready_seconds = time.monotonic() - started

    async def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self._process.returncode is not None:
                raise LocalSetupError(
                    f"llama-server exited with code {self._process.returncode} before it was "
                    f"ready; the last lines of {self.log_path}:\n{_tail(self.log_path)}")
            if await health(self.port, timeout=1.0) == "ok":
                return
            if time.monotonic() > deadline:
                raise LocalSetupError(
                    f"llama-server was not ready within {self.ready_timeout:g} s; the last "
                    f"lines of {self.log_path}:\n{_tail(self.log_path)}")
            # Polling a condition with a bounded deadline: the server offers no readiness
            # signal other than /health.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._process.wait(), timeout=0.1)

    async def stop(self, *, grace: float = 10.0) -> None:
        """Terminate the server's process group and wait for it (SIGKILL after ``grace``)."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    async def wait(self) -> int:
        """Wait until the server exits by itself; its exit code."""
        if self._process is None:
            raise LocalSetupError("this LocalServer is not running")
        return await self._process.wait()

    async def __aenter__(self) -> LocalServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Shielded: a cancelled run (Ctrl-C) must still wait for the server to go away.
        await asyncio.shield(self.stop())


def router_models(folder: Path) -> list[str]:
    """The names a router on ``folder`` serves (each GGUF's file name without ``.gguf``;
    a subfolder, a multimodal or split model, by its own name), after checking them: each
    GGUF starts with the GGUF magic, and the model tether fetches itself (the default one,
    by its file name) must be the published file, by its size and sha256."""
    if not folder.is_dir():
        raise LocalSetupError(f"--models-dir {folder} is not a folder")
    names: list[str] = []
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and entry.suffix == ".gguf":
            check_gguf(entry)
            if entry.name == DEFAULT_MODEL.filename:
                problem = model_problem(entry)
                if problem is not None:
                    raise LocalSetupError(problem)
            names.append(entry.stem)
        elif entry.is_dir() and any(entry.glob("*.gguf")):
            names.append(entry.name)
    if not names:
        raise LocalSetupError(f"--models-dir {folder} holds no .gguf model")
    return names


def router_preset(names: list[str], path: Path) -> Path | None:
    """For a router serving the default model (by its file name): an INI file of
    llama-server's model presets giving it the bundled chat template, with which the 0.5B
    model's calls come back as calls (measured: ``tool_calls`` for "What is 17 * 23? Use the
    calculator."); None when the folder does not hold it."""
    default = DEFAULT_MODEL.filename.removesuffix(".gguf")
    if default not in names:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"version = 1\n[{default}]\nchat-template-file = "
                    f"{bundled_chat_template()}\n", encoding="utf-8")
    return path


def _die_with_parent() -> Any:
    """On Linux, have the kernel send the server SIGTERM if tether dies without stopping it
    (SIGKILL, a crash), so no llama-server is left holding the port and 600 MB."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_death_signal() -> None:  # runs in the child between fork and exec
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return set_death_signal


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


__all__ = ["ALIAS", "HOST", "SYSTEM_PROMPT", "LocalServer", "ServerCommand",
           "bundled_chat_template", "free_port", "health", "router_models"]
