"""How tether's payloads are written into Temporal: JSON that keeps the order of keys.

Temporal's default JSON converter sorts keys. A tool's JSON Schema is shown to the model
as written (the order of its properties is part of what the model reads), so tether's
clients, workers and replayers write ``json/plain`` payloads in insertion order instead.
They read any ``json/plain`` payload, so a signal sent with the Temporal CLI still arrives.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)


class _OrderedJSON(JSONPlainPayloadConverter):
    def to_payload(self, value: Any) -> Payload | None:
        return Payload(metadata={"encoding": self.encoding.encode()},
                       data=json.dumps(value, separators=(",", ":"), allow_nan=False).encode())


class OrderedPayloadConverter(CompositePayloadConverter):
    """The default converters, with ``_OrderedJSON`` in place of the sorting one."""

    def __init__(self) -> None:
        super().__init__(*(
            _OrderedJSON() if isinstance(c, JSONPlainPayloadConverter) else c
            for c in DefaultPayloadConverter.default_encoding_payload_converters))


DATA_CONVERTER = dataclasses.replace(DataConverter.default,
                                     payload_converter_class=OrderedPayloadConverter)
