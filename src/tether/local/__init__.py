"""A local model on 127.0.0.1: llama-server built from the PyPI sdist, the pinned model.

- ``setup``: building llama-server, fetching the sha256-checked model, the cache layout;
- ``server``: ``LocalServer`` (start, wait until ready, stop cleanly) and its command line;
- ``data/``: the bundled chat template.

The commands (`tether local setup|serve`, `tether run --local`) live in ``tether.cli.local``.
"""

from __future__ import annotations

from tether.local.server import (
    ALIAS,
    HOST,
    SYSTEM_PROMPT,
    LocalServer,
    ServerCommand,
    bundled_chat_template,
    free_port,
    health,
)
from tether.local.setup import (
    DEFAULT_MODEL,
    LLAMA_CPP_PYTHON_VERSION,
    LocalPaths,
    ModelSource,
    Progress,
    Toolchain,
    check_gguf,
    default_cache_dir,
    default_model_path,
    find_toolchain,
    is_set_up,
    server_binary_path,
    setup,
)

__all__ = [
    "ALIAS",
    "DEFAULT_MODEL",
    "HOST",
    "LLAMA_CPP_PYTHON_VERSION",
    "SYSTEM_PROMPT",
    "LocalPaths",
    "LocalServer",
    "ModelSource",
    "Progress",
    "ServerCommand",
    "Toolchain",
    "bundled_chat_template",
    "check_gguf",
    "default_cache_dir",
    "default_model_path",
    "find_toolchain",
    "free_port",
    "health",
    "is_set_up",
    "server_binary_path",
    "setup",
]
