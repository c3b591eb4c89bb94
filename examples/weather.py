"""An example tool: a deterministic, made-up weather forecast (no network, no API key).

    tether run --local "What's the weather in Paris? Use the weather tool."

from the repository's root, whose tether.toml offers it (``[tools] python``); from anywhere
else, pass it: ``tether run --local --tools examples/weather.py "..."``. Any module-level
``@tool`` in such a file is offered to the model.
"""

from __future__ import annotations

import zlib

from tether import tool

_SKIES = ("sunny", "partly cloudy", "overcast", "light rain", "windy")


@tool
def get_weather(city: str) -> str:
    """Get today's weather forecast for a city.

    Args:
        city: The city's name, for example "Paris".
    """
    name = " ".join(city.split()).title()
    # The same city always gets the same forecast, so runs (and tests) are repeatable.
    seed = zlib.crc32(name.lower().encode())
    sky = _SKIES[seed % len(_SKIES)]
    celsius = 8 + seed % 20
    return f"{name}: {sky}, {celsius}°C"
