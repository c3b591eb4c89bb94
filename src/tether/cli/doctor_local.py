"""`tether doctor --local`: the local path, part by part: the toolchain that builds
llama-server (needed only while it is not built), the cache and the model (``doctor``'s
``check_local_cache``), and what answers on the local port (``tether.local.identify``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import LocalSetupError

if TYPE_CHECKING:
    from tether.config.schema import Config


async def check_local_path(config: Config) -> list[tuple[bool | None, str, str]]:
    """The toolchain and the server of the local path (the cache: ``check_local_cache``)."""
    from tether.local.identify import reusable
    from tether.local.setup import (
        default_cache_dir,
        default_model_path,
        find_toolchain,
        server_binary_path,
    )

    cache = default_cache_dir(config.local.cache_dir)
    out: list[tuple[bool | None, str, str]] = []
    binary = server_binary_path(cache)
    if binary.is_file() and os.access(binary, os.X_OK):
        out.append((True, "local toolchain", f"not needed: llama-server is built ({binary})"))
    else:
        try:
            tools = find_toolchain()
        except LocalSetupError as e:
            out.append((False, "local toolchain", str(e)))
        else:
            out.append((True, "local toolchain", f"cmake {tools.cmake}, C++ {tools.cxx}, "
                                                 f"{tools.generator}: can build llama-server"))
    model = default_model_path(cache)
    if config.local.model_path:
        model = Path(config.local.model_path).expanduser()
    url = f"http://127.0.0.1:{config.local.port}/v1"
    label = f"local server {url}"
    try:
        running = await reusable(config.local.port, model)
    except LocalSetupError as e:
        out.append((False, label, str(e)))
        return out
    if running:
        out.append((True, label, f"llama-server serving {model.name}: --local reuses it"))
    else:
        out.append((None, label, "not running: `tether run --local \"...\"` starts it for "
                                 "the run, `tether local serve` keeps it running"))
    return out


def local_path_ready(config: Config) -> bool:
    """Whether the local path is set up (llama-server built, the model there): then a local
    server that is not running is not a failure, ``tether run --local`` starts it."""
    from tether.local.setup import default_cache_dir, is_set_up

    cache = default_cache_dir(config.local.cache_dir)
    own = Path(config.local.model_path).expanduser() if config.local.model_path else None
    return is_set_up(cache, own)


__all__ = ["check_local_path", "local_path_ready"]
