"""What every `tether` command shares: exit codes, the run flags, building an Agent from
them, the error line, the clean first Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import math
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from tether.errors import ConfigError

EXIT_OK, EXIT_ERROR, EXIT_REFUSED, EXIT_NO_ANSWER = 0, 1, 2, 3


EXIT_INTERRUPTED = 130  # as a shell reports a process ended by Ctrl-C


EXIT_PIPE = 141  # as a shell reports a process ended by SIGPIPE: the reader left


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--provider", help="a [providers.NAME] entry of tether.toml")
    p.add_argument("--model", "-m", metavar="[PROVIDER:]MODEL",
                   help="the model to ask for; PROVIDER: (a configured provider's name) picks "
                        "the provider too, e.g. -m claude:claude-sonnet-4-5. A prefix that "
                        "names no configured provider is part of the model name "
                        "(qwen2.5:0.5b)")
    p.add_argument("--max-turns", type=_at_least_one, metavar="N", help="bound on model turns")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--context", choices=("trim", "summarize", "off"),
                   help="how a conversation longer than the model's window is sent "
                        "([agent] context)")
    p.add_argument("--temperature", type=_temperature, metavar="T", help="sampling temperature")
    p.add_argument("--max-tokens", type=_at_least_one, metavar="N",
                   help="the run's output token budget ([agent] max_output_tokens)")
    p.add_argument("--yes", "-y", action="store_true",
                   help="allow tools that need approval without asking ([tools] "
                        "permission_mode = \"allow\")")
    p.add_argument("--read-only", action="store_true",
                   help="only tools that change nothing may run ([tools] permission_mode = "
                        "\"read-only\")")
    p.add_argument("--otel", action="store_true",
                   help="trace the runs with OpenTelemetry, exported over OTLP as the "
                        "OTEL_EXPORTER_OTLP_* variables say (needs opentelemetry-sdk and an "
                        "OTLP exporter)")
    add_local_flag(p)
    from tether.cli.selection import add_tool_flags

    add_tool_flags(p)


def add_local_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local", action="store_true",
                   help="use a local llama-server, setting it up and starting it if needed")


# --- lists: one rule for every command that lists (sessions list, logs) --------------------

ALL = 1_000_000_000  # "no limit", as a number a store's LIMIT takes


def add_limit_flag(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """``-n N`` / ``--limit N``: how many ``what`` to list, 0 for all."""
    p.add_argument("-n", "--limit", dest="limit", type=list_limit, default=default,
                   metavar="N", help=f"how many {what} ({default}; 0 for all)")


def list_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is needed, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (all) or more, not {value}")
    return value


def fetch_count(limit: int) -> int:
    """How many to read for ``limit``: one more than shown, to know whether more exist."""
    return limit + 1 if limit else ALL


def shown_of(items: list[Any], limit: int) -> tuple[list[Any], bool]:
    """The first ``limit`` of ``items`` (read with ``fetch_count``), and whether there were
    more; printing the list, say so with ``say_more``."""
    if limit and len(items) > limit:
        return items[:limit], True
    return items, False


def say_more(shown: int) -> None:
    """The line (on stderr: the list on stdout stays data) saying a list was cut."""
    from tether.cli.render import stderr_console
    from tether.display import shown as styled

    stderr_console().print(styled((f"{shown} shown; more are stored (-n 0 lists all)", "dim")))


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is needed, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number is needed, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 up, not {text!r}")
    return value


def error(message: str) -> None:
    from tether.cli.render import stderr_console
    from tether.display import shown

    # Messages quote what servers, tools and models wrote: printed literally.
    stderr_console().print(shown(("tether:", "red"), f" {message}"))


# What piped standard input is called when it is given beside the prompt (outside text).
STDIN = "standard input"


def prompt_parts(prompt: str, outside: str | None, attached: Sequence[Any] = ()) -> Any:
    """What the agent is given: the prompt, after the outside text piped beside it and the
    parts of the files attached (``-a FILE``)."""
    if outside is None and not attached:
        return prompt
    from tether.messages import Text
    from tether.trust import outside_text

    piped = (outside_text(outside, STDIN),) if outside is not None else ()
    return (*attached, *piped, Text(prompt))


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration layer a command's flags make (over tether.toml and the rest)."""
    # `--local` (tether.cli.local.serving_for_run) points the local provider at its server.
    out: dict[str, Any] = copy.deepcopy(getattr(args, "local_config", None) or {})
    _provider_and_model(args, out)
    _agent_flags(args, out)
    _permission_flags(args, out)
    if getattr(args, "otel", False):
        out.setdefault("telemetry", {})["enabled"] = True
    from tether.cli.selection import tool_overrides

    tool_overrides(args, out)  # last: --no-tools wins over --local's tool list
    return out


def _provider_and_model(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """``--provider`` and ``--model`` into ``out``: a ``PROVIDER:`` prefix naming a
    configured provider picks it (and must agree with ``--provider``)."""
    provider, model = getattr(args, "provider", None), getattr(args, "model", None)
    if not (provider or model):
        return
    from tether.config.layers import load_config

    base = load_config(args.workspace, out or None)
    if provider:
        base.provider_config(provider)  # an unknown name: an error naming the known ones
    if model:
        prefix, sep, rest = model.partition(":")
        if sep and rest and prefix in base.providers:
            if provider and provider != prefix:
                raise ConfigError(f"--model {model} picks provider {prefix!r} but "
                                  f"--provider says {provider!r}; choose one")
            provider, model = prefix, rest
    if provider:
        out["default_provider"] = provider
    if model:
        name, _ = base.provider_config(provider)
        out.setdefault("providers", {}).setdefault(name, {})["model"] = model


def _agent_flags(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """The ``[agent]`` flags: turns, system prompt, context, sampling, output bound."""
    if getattr(args, "max_turns", None) is not None:
        out.setdefault("agent", {})["max_turns"] = args.max_turns
    if getattr(args, "system", None):
        out.setdefault("agent", {})["system_prompt"] = args.system
    if getattr(args, "context", None):
        out.setdefault("agent", {})["context"] = args.context
    if getattr(args, "temperature", None) is not None:
        out.setdefault("agent", {})["temperature"] = args.temperature
    if getattr(args, "max_tokens", None) is not None:
        out.setdefault("agent", {})["max_output_tokens"] = args.max_tokens


def _permission_flags(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """``--yes`` or ``--read-only``: the tools' permission mode (both: an error)."""
    yes, read_only = getattr(args, "yes", False), getattr(args, "read_only", False)
    if yes and read_only:
        raise ConfigError("--yes and --read-only contradict each other; choose one")
    if yes:
        out.setdefault("tools", {})["permission_mode"] = "allow"
    if read_only:
        out.setdefault("tools", {})["permission_mode"] = "read-only"


def make_agent(args: argparse.Namespace, **agent_kwargs: Any) -> tuple[Any, Any]:
    """(agent, config) for a command's flags; a console approver when a person is there."""
    from tether.config.build import agent_from_config
    from tether.config.layers import load_config

    cfg = load_config(args.workspace, overrides(args))
    if getattr(args, "tool_files", None):
        from tether.config.tool_files import load_tool_references

        agent_kwargs.setdefault("tools", load_tool_references(args.tool_files))
        agent_kwargs.setdefault("tool_files", list(args.tool_files))
    if "approver" not in agent_kwargs and sys.stdin.isatty():
        from tether.cli.approver import ConsoleApprover

        agent_kwargs["approver"] = ConsoleApprover(workspace=workspace_of(args, cfg))
    agent = agent_from_config(args.workspace, config=cfg, **agent_kwargs)
    if sys.stdin.isatty() and any(s.auth == "oauth" for s in cfg.mcp):
        from tether.cli.render import stderr_console
        from tether.cli.sign_in import allow_sign_in

        allow_sign_in(agent.toolsets, stderr_console())  # a person is there to sign in
    if getattr(args, "only_tools", None):
        from tether.cli.offer_only import offer_only

        agent = offer_only(agent, args.only_tools)
    return agent, cfg


def prepare_local(args: argparse.Namespace) -> None:
    """For ``--local``: the configuration layer it adds (``args.local_config``), set before
    anything starts, so a command can build its agent (checking its config, tools, output
    schema, attachments) first and start the server only for a run that can go ahead."""
    if getattr(args, "local", False) and getattr(args, "local_config", None) is None:
        from tether.cli.local import local_layer

        args.local_config = local_layer(args)


def refuse_unsendable(agent: Any, parts: Any) -> None:
    """An image for a server whose profile says it takes none: refused before anything
    starts or is sent (the wire would refuse it after the run began)."""
    from tether.messages import Image

    profile: Any = getattr(agent.model, "profile", None)
    if getattr(profile, "accepts_images", None) is not False or isinstance(parts, str):
        return
    if any(isinstance(p, Image) for p in parts):
        raise ConfigError(f"the attached image cannot be sent: the server takes no images "
                          f"(profile {profile.name!r}: accepts_images is false); use a "
                          f"server and model with vision, or leave the image out")


@contextlib.asynccontextmanager
async def local_serving(args: argparse.Namespace) -> AsyncIterator[None]:
    """While a command runs with ``--local``: a local llama-server (the one answering on
    the local port, else set up and started, stopped at the end), and the configuration
    layer pointing the ``local`` provider at it; nothing without ``--local``."""
    if not getattr(args, "local", False):
        yield
        return
    from tether.cli.local import serving_for_run

    async with serving_for_run(args):
        yield


def telemetry_export(cfg: Any) -> contextlib.AbstractContextManager[None]:
    """While a command's agent runs: the OTLP export of its spans and metrics when its runs
    are traced (``--otel``, or ``[telemetry] enabled``), nothing otherwise. A command is its
    own host, so it sets up the export, and sends what is buffered before it exits."""
    if not cfg.telemetry.enabled:
        return contextlib.nullcontext()
    from tether.telemetry.export import otlp_export

    return otlp_export()


def workspace_of(args: argparse.Namespace, cfg: Any) -> str:
    """The folder the file tools work in: ``[tools] workspace``, else ``-w``."""
    return str(cfg.tools.workspace or args.workspace)


def assumed_profile_notice(agent: Any, cfg: Any) -> str | None:
    """A line saying which server profile is assumed, when nothing named it."""
    if not getattr(agent.model, "profile_assumed", False):
        return None
    name, _ = cfg.provider_config()
    return (f"provider {name!r}: no profile names its server, so \"generic\" is assumed "
            f"(set providers.{name}.profile; `tether doctor` probes the server)")


def no_provider_help(cfg: Any, error: Exception | str, provider: str | None = None) -> str:
    """The advice after "no model server answered", fitting the provider (``provider``,
    else the default one): a local server to start, or a hosted one to check (network,
    base_url, key). Names the URL tried. ``run``, ``chat`` and ``doctor`` all give it."""
    from tether.config.build import base_url, key_variable
    from tether.display import inline

    name, pcfg = cfg.provider_config(provider)
    said = inline(error)  # it may quote what a server said: on one line
    url = base_url(pcfg)
    if not _is_local(url):
        key = key_variable(pcfg)
        checks = [f"the network connection to {url}",
                  f"providers.{name}.base_url" + ("" if pcfg.base_url else " (unset: the "
                                                  f"{pcfg.kind} default)")]
        if key:
            checks.append(f"the API key in {key}")
        return (f"{said}\n\nProvider {name!r} ({pcfg.kind}) could not be reached at {url}. "
                f"Check {', '.join(checks[:-1])} and {checks[-1]}.")
    if pcfg.kind == "ollama":
        return (f"{said}\n\nNo Ollama server answered for provider {name!r} at {url}. "
                f"Start Ollama there (`ollama serve`; the app starts it too), or point "
                f"providers.{name}.base_url at the one you run.")
    if is_local_path(cfg, name):
        return (f"{said}\n\nNo model server answered for provider {name!r} at {url}: "
                f"the bundled llama-server is not running. `tether run --local \"...\"` "
                f"starts it for the run (setting it up the first time), and `tether local "
                f"serve` keeps it running; `tether doctor --local` checks the local path.")
    return (f"{said}\n\nNo model server answered for provider {name!r} at {url}. "
            f"Either start one there (`tether local serve`, or `tether run --local ...` for "
            f"a local llama-server), or point tether at a server in ./tether.toml "
            f"(`tether config init` writes one):\n"
            f"  [providers.{name}]\n  kind = \"openai-chat\"\n"
            f"  base_url = \"http://127.0.0.1:8080/v1\"\n  model = \"...\"\n"
            f"and select it with default_provider or --provider.")


def is_local_path(cfg: Any, name: str) -> bool:
    """Whether provider ``name`` is the local path: the ``local`` provider at the port of
    the bundled llama-server (``[local] port``), the one ``--local`` starts."""
    from tether.config.build import base_url

    if name != "local" or name not in cfg.providers:
        return False
    url = base_url(cfg.providers[name]).rstrip("/")
    return url == f"http://127.0.0.1:{cfg.local.port}/v1"


def _is_local(url: str) -> bool:
    """Whether ``url`` is on this machine or a private network (a server someone starts)."""
    from tether.config.build import is_local_url

    return is_local_url(url)


@contextlib.contextmanager
def graceful_interrupt(before: Callable[[], None] | None = None) -> Iterator[asyncio.Event]:
    """The first Ctrl-C stops the run cleanly (stop cause "interrupted", the
    conversation kept valid); a second one aborts at once. ``before`` runs first (a
    renderer settling its live answer, so the partial answer is shown once)."""
    interrupt = asyncio.Event()
    loop = asyncio.get_running_loop()

    def first_press() -> None:
        interrupt.set()
        if before is not None:
            before()
        from tether.cli.render import stderr_console

        console = stderr_console()
        if console.is_terminal:
            console.print()  # off the line the terminal echoed ^C on (a prompt, an answer)
        error("interrupting (Ctrl-C again to abort now)")
        loop.remove_signal_handler(signal.SIGINT)  # the next press raises KeyboardInterrupt

    try:
        loop.add_signal_handler(signal.SIGINT, first_press)
    except (NotImplementedError, RuntimeError):  # no signal handlers here (Windows, threads)
        yield interrupt
        return
    try:
        yield interrupt
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def exit_code(result: Any) -> int:
    """0 answered, 1 error, 2 refused: the gate refused a call the model asked for (denied,
    blocked, nobody to approve it), even if the model then answered, or the run paused
    waiting for approval; 3 no answer; 130 interrupted."""
    if result.error is not None:
        return EXIT_ERROR
    if result.stop_cause == "interrupted":
        return EXIT_INTERRUPTED
    refused = any(r.denied or r.blocked for r in result.tool_calls)
    if result.stop_cause == "paused" or refused:
        return EXIT_REFUSED
    if result.stop_cause == "completed":
        return EXIT_OK
    return EXIT_NO_ANSWER
