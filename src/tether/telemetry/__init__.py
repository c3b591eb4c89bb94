"""OpenTelemetry for tether's runs: every run, model call, tool call and gate decision as a
span of the GenAI semantic conventions, tether's own decisions on them under ``tether.``.

Optional: ``pip install 'tether[otel]'`` (``opentelemetry-api`` only). Off by default, and
nothing of OpenTelemetry is imported until an agent is instrumented::

    agent = Agent(model, tools, instrument=True)                     # the global providers
    agent = Agent(model, tools, instrument=Instrumentation(include_content=True))

Spans and metrics go to the tracer and meter providers the host configured (or the ones an
``Instrumentation`` names). ``docs/telemetry.md`` lists every span, attribute and event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.telemetry.spans import RunTelemetry


@dataclass(frozen=True, slots=True)
class Instrumentation:
    """How an agent's runs are traced.

    ``include_content``: put prompts, answers, tool arguments and results on the spans
    (off by default: they may be private). ``agent_name`` names the ``invoke_agent`` span
    (a sub-agent's is its profile's name). ``tracer_provider`` / ``meter_provider``: where
    spans and metrics go instead of the global providers.
    """

    include_content: bool = False
    agent_name: str = "tether"
    tracer_provider: Any = None
    meter_provider: Any = None


def instrumentation(value: bool | Instrumentation) -> Instrumentation:
    """``Agent(instrument=...)`` as an ``Instrumentation``; a ConfigError without the API."""
    import importlib.util

    if isinstance(value, bool):
        settings = Instrumentation()
    elif isinstance(value, Instrumentation):
        settings = value
    else:
        raise ConfigError(f"instrument must be True, False or an Instrumentation, not "
                          f"{type(value).__name__}")
    if importlib.util.find_spec("opentelemetry.trace") is None:
        raise ConfigError("tracing (--otel, [telemetry] enabled, or instrument=True) needs "
                          "the OpenTelemetry API: pip install 'tether[otel]'")
    return settings


def __getattr__(name: str) -> Any:
    # The recorder imports opentelemetry: loaded when a run is instrumented, not before.
    if name == "RunTelemetry":
        from tether.telemetry.spans import RunTelemetry

        return RunTelemetry
    raise AttributeError(f"module 'tether.telemetry' has no attribute {name!r}")


__all__ = ["Instrumentation", "RunTelemetry", "instrumentation"]
