"""Sessions that survive the process: a conversation, its taint, its events, its outcomes.

A ``Session`` is what a host hands to ``agent.run(..., session=...)``. Everything is written
as it happens and committed at once (append-only), so a killed process loses at most the
model response that was still streaming::

    session = Session.create(provider="local", model="qwen", title="tidy the notes")
    await agent.run("Tidy my notes", session=session)
    ...  # later, in another process
    session = Session.load(session_id)
    await agent.run("Now summarise them", session=session)   # same taint, never cleaner

The storage behind it is a ``SessionStore``: a small protocol of plain JSON-ready values.
``SQLiteStore`` (``sqlite``) is the embedded default: one file under the user's data dir
(``$XDG_DATA_HOME/tether/sessions.db``, else ``~/.local/share/tether/sessions.db``), or
``TETHER_STORE``, or ``[store] path``. ``PostgresStore`` (``tether.store.postgres``, the
``postgres`` extra) keeps them in one PostgreSQL database for many processes and machines:
``TETHER_STORE_URL`` or ``[store] url``. ``open_store`` (``default``) picks between them.
"""

from tether.store.base import (
    SessionConflict,
    SessionInfo,
    SessionNotFound,
    SessionRecord,
    SessionStore,
    StoreError,
    new_session_id,
    search_text,
)
from tether.store.default import default_store_url, open_store
from tether.store.session import Session
from tether.store.sqlite import (
    MIGRATIONS,
    SCHEMA_VERSION,
    SQLiteStore,
    default_store_path,
    migrate,
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SQLiteStore",
    "Session",
    "SessionConflict",
    "SessionInfo",
    "SessionNotFound",
    "SessionRecord",
    "SessionStore",
    "StoreError",
    "default_store_path",
    "default_store_url",
    "migrate",
    "new_session_id",
    "open_store",
    "search_text",
]
