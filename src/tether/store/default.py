"""Which store sessions use when none is named: the SQLite file, or a PostgreSQL database.

``open_store`` opens each store once per process and shares it. The choice takes plain
values (what ``[store] path`` and ``[store] url`` say reach it through the CLI), so the
store package never reads the configuration: the environment wins over what is passed
(``TETHER_STORE_URL`` for a database, ``TETHER_STORE`` for a file), the file stays the
default.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tether.errors import ConfigError
from tether.store.base import SessionStore
from tether.store.postgres import PostgresStore
from tether.store.sqlite import SQLiteStore, default_store_path


def default_store_url(configured: str | None = None) -> str | None:
    """The PostgreSQL store's URL when one is chosen: ``TETHER_STORE_URL``, else
    ``configured`` (``[store] url``) unless ``TETHER_STORE`` names a file (the environment
    wins over the files). None: the SQLite file of ``default_store_path``."""
    url, path = os.environ.get("TETHER_STORE_URL"), os.environ.get("TETHER_STORE")
    if url and path:
        raise ConfigError("TETHER_STORE (a SQLite file) and TETHER_STORE_URL (a PostgreSQL "
                          "database) are both set; unset one")
    if url:
        return url
    if path:
        return None
    return configured or None


_DEFAULT_STORES: dict[Path | str, SessionStore] = {}
_DEFAULT_LOCK = threading.Lock()


def open_store(path: str | Path | None = None, *, url: str | None = None) -> SessionStore:
    """The store sessions use, opened once per process and shared (a closed one is opened
    anew): the PostgreSQL database at ``url``, or the SQLite file at ``path``; neither
    given: ``default_store_url()`` (``TETHER_STORE_URL``), else ``default_store_path()``."""
    if path is not None and url is not None:
        raise ConfigError("open_store: give a path (SQLite) or a url (PostgreSQL), not both")
    if path is None and url is None:
        url = default_store_url()
    key: Path | str
    if url is not None:
        key = url
    else:
        key = (Path(path).expanduser() if path is not None else default_store_path()).resolve()
    with _DEFAULT_LOCK:
        store = _DEFAULT_STORES.get(key)
        if store is None or getattr(store, "closed", False):
            store = PostgresStore(key) if isinstance(key, str) else SQLiteStore(key)
            _DEFAULT_STORES[key] = store
        return store


__all__ = ["default_store_url", "open_store"]
