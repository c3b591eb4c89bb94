"""OpenTelemetry for tether's runs: every run, model call, tool call and gate decision as a
span of the GenAI semantic conventions, tether's own decisions on them under ``tether.``.

Optional: ``pip install 'tether[otel]'`` (``opentelemetry-api`` only). Off by default, and
nothing of OpenTelemetry is imported until a run is observed::

    agent = Agent(model, tools, instrument=Instrumentation())        # the global providers
    agent = Agent(model, tools, instrument=Instrumentation(include_content=True))

An ``Instrumentation`` is the agent's ``Instrument`` (``tether.run.host``): the agent calls
it for each run's observer and never imports this package. Spans and metrics go to the
tracer and meter providers the host configured (or the ones an ``Instrumentation``
names). ``docs/telemetry.md`` lists every span, attribute and event.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.conversation import Conversation
    from tether.run.host import Instrument, RunHost
    from tether.telemetry.spans import RunTelemetry


@dataclass(frozen=True, slots=True)
class Instrumentation:
    """How an agent's runs are traced: ``Agent(instrument=Instrumentation(...))``.

    ``include_content``: put prompts, answers, tool arguments and results on the spans
    (off by default: they may be private). ``agent_name`` names the ``invoke_agent`` span
    (a sub-agent's is its profile's name). ``tracer_provider`` / ``meter_provider``: where
    spans and metrics go instead of the global providers. Made without the OpenTelemetry
    API installed, it is a ``ConfigError`` saying what to install.
    """

    include_content: bool = False
    agent_name: str = "tether"
    tracer_provider: Any = None
    meter_provider: Any = None

    def __post_init__(self) -> None:
        if importlib.util.find_spec("opentelemetry.trace") is None:
            raise ConfigError("tracing (--otel, [telemetry] enabled, or an Instrumentation) "
                              "needs the OpenTelemetry API: pip install 'tether[otel]'")

    def observer(self, host: RunHost, conversation: Conversation, path: tuple[str, ...],
                 stream_requests: bool) -> RunTelemetry:
        """The recorder of one run's spans and metrics (``tether.run.host.Instrument``)."""
        # The recorder imports opentelemetry: loaded when a run is observed, not before.
        from tether.telemetry.spans import RunTelemetry

        return RunTelemetry(self, host, conversation, path, stream_requests)

    def for_agent(self, name: str) -> Instrumentation:
        """The same, with spans named for the agent ``name`` (a sub-agent's profile)."""
        return dataclasses.replace(self, agent_name=name)



if TYPE_CHECKING:

    def _an_instrument(instrumentation: Instrumentation) -> Instrument:
        return instrumentation  # mypy holds it to the protocol the agent calls


__all__ = ["Instrumentation"]
