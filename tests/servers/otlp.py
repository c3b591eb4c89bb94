"""A real OTLP/HTTP receiver on 127.0.0.1: what an OpenTelemetry collector is to an exporter.

It accepts ``POST /v1/traces`` and ``POST /v1/metrics`` (protobuf, gzip or not), decodes
them with opentelemetry-proto (the exporter's own dependency), and keeps the spans and the
metric names it received.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    span_id: bytes
    parent_span_id: bytes
    trace_id: bytes
    attributes: dict[str, Any]
    events: tuple[str, ...]
    service_name: str


class OtlpReceiver:
    """``with OtlpReceiver() as otlp: ...; otlp.url, otlp.spans, otlp.metric_names``"""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.metric_names: set[str] = set()
        self.paths: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                reply = receiver._take(self.path, body)
                if reply is None:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _take(self, path: str, body: bytes) -> bytes | None:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        with self._lock:
            self.paths.append(path)
        if path == "/v1/traces":
            traces = trace_service_pb2.ExportTraceServiceRequest()
            traces.ParseFromString(body)
            spans = []
            for resource_spans in traces.resource_spans:
                service = _attributes(resource_spans.resource.attributes).get("service.name", "")
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        spans.append(ReceivedSpan(
                            span.name, span.span_id, span.parent_span_id, span.trace_id,
                            _attributes(span.attributes), tuple(e.name for e in span.events),
                            str(service)))
            with self._lock:
                self.spans.extend(spans)
            return bytes(trace_service_pb2.ExportTraceServiceResponse().SerializeToString())
        if path == "/v1/metrics":
            metrics = metrics_service_pb2.ExportMetricsServiceRequest()
            metrics.ParseFromString(body)
            names = {metric.name for rm in metrics.resource_metrics
                     for scope in rm.scope_metrics for metric in scope.metrics}
            with self._lock:
                self.metric_names |= names
            return bytes(metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString())
        return None

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def _value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None

