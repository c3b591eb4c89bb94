"""Spans and metrics sent over OTLP, for a process with no OpenTelemetry set up of its own
(``tether run --otel``). A host that configured its own providers does not need this.

The exporters read the standard variables themselves (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``..._TRACES_ENDPOINT``, ``..._HEADERS``, ``..._TIMEOUT``...); ``OTEL_EXPORTER_OTLP_PROTOCOL``
picks ``http/protobuf`` (the default) or ``grpc``; ``OTEL_TRACES_EXPORTER`` /
``OTEL_METRICS_EXPORTER`` = ``none`` turns one signal off; ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` describe the process (``service.name`` defaults to tether).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from tether.errors import ConfigError

_SDK_HINT = ("pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http "
             "(or opentelemetry-exporter-otlp-proto-grpc for OTEL_EXPORTER_OTLP_PROTOCOL=grpc)")


@contextlib.contextmanager
def otlp_export(env: Mapping[str, str] | None = None) -> Iterator[None]:
    """Global tracer and meter providers that export over OTLP while the block runs; what
    is still buffered is sent when it ends (the providers are shut down)."""
    env = os.environ if env is None else env
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(f"exporting telemetry needs the OpenTelemetry SDK: {_SDK_HINT}") from None
    span_exporter, metric_exporter = _exporters(env)
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "tether"}))
    tracer_provider = TracerProvider(resource=resource)
    if span_exporter is not None:
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    readers = [] if metric_exporter is None else [PeriodicExportingMetricReader(metric_exporter)]
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    try:
        yield
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


def _exporters(env: Mapping[str, str]) -> tuple[Any, Any]:
    """The span and metric exporters the environment asks for (``None``: that one off)."""
    wanted = {signal: env.get(f"OTEL_{signal.upper()}_EXPORTER", "otlp").strip().lower()
              for signal in ("traces", "metrics")}
    for signal, name in wanted.items():
        if name not in ("otlp", "none"):
            raise ConfigError(f"OTEL_{signal.upper()}_EXPORTER={name!r}: tether exports over "
                              f"OTLP only (otlp, or none to turn it off)")
    out: list[Any] = []
    for signal in ("traces", "metrics"):
        if wanted[signal] == "none":
            out.append(None)
            continue
        protocol = (env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
                    or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
        out.append(_exporter(signal, protocol))
    return out[0], out[1]


def _exporter(signal: str, protocol: str) -> Any:
    if protocol not in ("http/protobuf", "grpc"):
        raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use http/protobuf or grpc")
    wire = "http" if protocol == "http/protobuf" else "grpc"
    module, name = (("trace_exporter", "OTLPSpanExporter") if signal == "traces"
                    else ("metric_exporter", "OTLPMetricExporter"))
    try:
        exporter = getattr(importlib.import_module(
            f"opentelemetry.exporter.otlp.proto.{wire}.{module}"), name)
    except ImportError:
        raise ConfigError(f"exporting telemetry over OTLP ({protocol}) needs its exporter: "
                          f"{_SDK_HINT}") from None
    return exporter()
