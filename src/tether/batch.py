"""Many prompts side by side: a fresh conversation per item, bounded concurrency, results
appended as JSONL as each item finishes.

::

    summary = await run_batch(agent, ["What is 2+3?", {"id": "q2", "prompt": "..."}],
                              concurrency=4, out="out.jsonl")

Each input is a bare string, or ``{"id", "prompt", "meta"}`` where ``prompt`` may be a list
of turns run one after another on one conversation. A result line holds ``id, ok, text,
error, stop_cause, usage, taint, blocked_sends, refused, tool_calls, turns, elapsed, meta``,
and ``session_id`` when the item was logged: ``session_for`` gives each item a stored
session (``tether batch`` makes one per item, tagged with the batch, so ``tether logs``
shows them).
An interrupted batch keeps every line written; ``resume=True`` skips the ids already in
``out``. Batches are unattended: under ``permission_mode = "ask"`` with no approver, calls
that need approval are refused (``tether batch --yes`` allows them).
"""

from __future__ import annotations

import asyncio
import codecs
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from tether.agent import Agent
from tether.conversation import Conversation, SessionLike
from tether.errors import TetherError
from tether.messages import Usage, loads_bounded, usage_to_dict
from tether.outcome import StopCause
from tether.result import RunResult, final_result, summed
from tether.run.loop import run_events
from tether.trust import CLEAN, Taint


class BatchError(TetherError):
    """The batch cannot start: bad input lines, or an output file it would overwrite."""


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One input: ``turns`` run in order on one fresh conversation."""

    id: str
    turns: tuple[str, ...]
    meta: Any = None


@dataclass(frozen=True, slots=True)
class ItemResult:
    """What became of one item (one JSONL line of the output)."""

    id: str
    ok: bool
    text: str
    error: str | None
    stop_cause: str | None
    usage: Usage
    taint: Taint
    blocked_sends: int
    refused: int
    tool_calls: int
    turns: int
    elapsed: float
    meta: Any = None
    session_id: str | None = None  # the session it was logged to (``session_for``)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "ok": self.ok, "text": self.text, "error": self.error,
            "stop_cause": self.stop_cause, "usage": usage_to_dict(self.usage),
            "taint": self.taint.to_dict(), "blocked_sends": self.blocked_sends,
            "refused": self.refused, "tool_calls": self.tool_calls, "turns": self.turns,
            "elapsed": round(self.elapsed, 3), "meta": self.meta,
            **({"session_id": self.session_id} if self.session_id is not None else {}),
        }


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """A snapshot, handed to ``on_progress`` whenever an item starts or finishes.

    ``total`` counts the items to run now (after ``limit`` and the ids skipped by resume);
    ``state`` is ``running``, ``finished`` or ``interrupted``; ``last`` is the item that just
    finished, if that is what changed.
    """

    total: int
    ok: int = 0
    failed: int = 0
    running: int = 0
    skipped: int = 0
    usage: Usage = field(default_factory=Usage)
    elapsed: float = 0.0
    state: str = "running"
    last: ItemResult | None = None

    @property
    def finished(self) -> int:
        return self.ok + self.failed

    @property
    def not_run(self) -> int:
        return self.total - self.finished


def item_from_value(value: Any, index: int, where: str = "item") -> BatchItem:
    """A ``BatchItem`` from a bare string or ``{"id", "prompt", "meta"}``; ``index`` (1-based)
    is the id when none is given."""
    if isinstance(value, BatchItem):
        return value
    if isinstance(value, str):
        value = {"prompt": value}
    if not isinstance(value, Mapping):
        raise BatchError(f"{where}: expected a string or an object with \"prompt\", "
                         f"not {type(value).__name__}")
    unknown = sorted(set(value) - {"id", "prompt", "meta"})
    if unknown:
        raise BatchError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: id, prompt, "
                         f"meta)")
    prompt = value.get("prompt")
    turns: tuple[str, ...]
    if isinstance(prompt, str):
        turns = (prompt,)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, str) for t in prompt):
        turns = tuple(prompt)
    else:
        raise BatchError(f"{where}: \"prompt\" must be a string or a non-empty list of "
                         f"strings (turns)")
    if not all(t.strip() for t in turns):
        raise BatchError(f"{where}: a prompt is empty")
    raw_id = value.get("id", index)
    if not isinstance(raw_id, str | int) or isinstance(raw_id, bool) or str(raw_id) == "":
        raise BatchError(f"{where}: \"id\" must be a non-empty string or a number")
    return BatchItem(str(raw_id), turns, value.get("meta"))


def read_items(path: str | Path) -> list[BatchItem]:
    """Every item of a JSONL file (UTF-8, blank lines skipped); a bad line is a
    ``BatchError`` naming its number, before anything runs."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BatchError(f"cannot read {path}: {e}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise BatchError(f"{path}: the file is UTF-16; JSONL input must be UTF-8: save it as "
                         f"UTF-8")
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    items: list[BatchItem] = []
    # Lines end at "\n" only: str.splitlines would also split inside a JSON string that
    # holds U+2028 or a form feed, which JSON allows there.
    for number, raw in enumerate(data.split(b"\n"), 1):
        where = f"{path} line {number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BatchError(f"{where}: not UTF-8 (byte 0x{raw[e.start]:02x} at byte "
                             f"{e.start + 1} of the line); JSONL input must be UTF-8: save "
                             f"it as UTF-8") from None
        if not line.strip():
            continue
        try:
            value = loads_bounded(line)
        except ValueError as e:
            raise BatchError(f"{where}: not JSON ({e}); each line is a JSON string or "
                             f"{{\"id\", \"prompt\", \"meta\"}}") from None
        item = item_from_value(value, number, where)
        if not _encodable(item.turns):
            raise BatchError(f"{where}: the prompt holds a lone surrogate escape (such as "
                             f"\\ud800), which is not text")
        items.append(item)
    return _check_unique(items)


def _encodable(texts: Iterable[str]) -> bool:
    try:
        for text in texts:
            text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_unique(items: list[BatchItem]) -> list[BatchItem]:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise BatchError(f"id {item.id!r} appears twice; ids must be unique so that "
                             f"results (and --resume) can name them")
        seen.add(item.id)
    return items


def finished_ids(out: str | Path) -> set[str]:
    """The ids with a whole result line in ``out``. A line a kill cut short, wherever it
    was cut (inside a multi-byte character too), does not count: its item runs again."""
    path = Path(out)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    except OSError as e:
        raise BatchError(f"cannot read {path} to resume: {e}") from None
    ids: set[str] = set()
    for raw in data.split(b"\n"):
        try:
            record = loads_bounded(raw.decode("utf-8"))
        except ValueError:  # not UTF-8 or not JSON: a line cut by a kill
            continue
        if isinstance(record, dict) and "id" in record:
            ids.add(str(record["id"]))
    return ids


async def run_batch(
    agent: Agent | Callable[[], Agent | Awaitable[Agent]],
    items: Iterable[BatchItem | str | Mapping[str, Any]],
    *,
    concurrency: int = 4,
    limit: int | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    on_progress: Callable[[BatchProgress], None] | None = None,
    session_for: Callable[[BatchItem], SessionLike] | None = None,
) -> list[ItemResult]:
    """Run every item on a fresh conversation, at most ``concurrency`` at once; returns the
    results in the order they finished.

    ``session_for`` gives an item the stored session its turns are logged to (a new
    ``Session``), called as the item starts; its id joins the item's result.

    ``agent`` is shared by all items, or a factory called once per item (each agent it makes
    is closed after its item). ``limit`` takes the first N items of the input; with
    ``resume`` the ids already in ``out`` are then skipped. Each result is appended to
    ``out`` (JSONL) the moment its item finishes. Cancelling (Ctrl-C) stops the running
    items, keeps what was written and re-raises; ``on_progress`` gets a last snapshot with
    ``state == "interrupted"``.
    """
    todo, skipped = plan_batch(items, concurrency=concurrency, limit=limit, out=out,
                               resume=resume)
    return await drive_batch(todo, lambda item: _run_item(agent, item, session_for),
                             skipped=skipped,
                             concurrency=concurrency, out=out, on_progress=on_progress)


def plan_batch(
    items: Iterable[BatchItem | str | Mapping[str, Any]], *, concurrency: int,
    limit: int | None, out: str | Path | None, resume: bool,
) -> tuple[list[BatchItem], int]:
    """The items a batch runs (the first ``limit``; with ``resume``, less the ids ``out``
    already has) and how many were skipped; a BatchError for bad arguments, repeated ids,
    or an ``out`` that holds results without ``resume``."""
    if concurrency < 1:
        raise BatchError(f"concurrency must be at least 1, not {concurrency}")
    if limit is not None and limit < 0:
        raise BatchError(f"limit must not be negative, not {limit}")
    todo = _check_unique([item_from_value(v, n, f"item {n}") for n, v in enumerate(items, 1)])
    if limit is not None:
        todo = todo[:limit]
    done_ids: set[str] = set()
    if out is not None:
        out = Path(out)
        if resume:
            done_ids = finished_ids(out)
        elif out.exists() and out.stat().st_size > 0:
            raise BatchError(f"{out} already holds results; pass resume=True (--resume) to "
                             f"skip the ids it has, or remove it to start over")
    skipped = sum(item.id in done_ids for item in todo)
    return [item for item in todo if item.id not in done_ids], skipped


async def drive_batch(
    todo: Sequence[BatchItem], run_item: Callable[[BatchItem], Awaitable[ItemResult]], *,
    skipped: int = 0, concurrency: int, out: str | Path | None = None,
    on_progress: Callable[[BatchProgress], None] | None = None,
) -> list[ItemResult]:
    """``run_item`` for each of ``todo``, at most ``concurrency`` at once (in process, or
    waiting on durable runs): each result appended to ``out`` the moment it is there, and
    ``on_progress`` told. A BatchError (``out`` cannot be written, or what ``run_item``
    raised) stops the rest; cancelling stops them, keeps what was written and re-raises,
    after a last snapshot with ``state == "interrupted"``. Returns the results in the order
    they finished."""
    out = Path(out) if out is not None else None
    progress = BatchProgress(total=len(todo), skipped=skipped)
    started = time.perf_counter()
    results: list[ItemResult] = []

    def report(**changes: Any) -> None:
        nonlocal progress
        progress = replace(progress, elapsed=time.perf_counter() - started, **changes)
        if on_progress is not None:
            on_progress(progress)

    sink = _open_sink(out) if out is not None else None
    queue: asyncio.Queue[BatchItem] = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)

    async def worker() -> None:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            report(running=progress.running + 1, last=None)
            result = await run_item(item)
            results.append(result)
            if sink is not None:
                line = json.dumps(result.to_dict(), ensure_ascii=False, default=str) + "\n"
                try:
                    sink.write(line)
                    sink.flush()
                except OSError as e:  # the disk is full, the file system went away
                    raise BatchError(f"cannot write the result of {result.id!r} to {out}: "
                                     f"{e}") from None
            report(running=progress.running - 1, ok=progress.ok + result.ok,
                   failed=progress.failed + (not result.ok),
                   usage=progress.usage + result.usage, last=result)

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(todo)))]
    try:
        report()
        await asyncio.gather(*workers)
        report(state="finished", last=None)
    except asyncio.CancelledError:
        await _stop(workers)
        report(state="interrupted", running=0, last=None)
        raise
    except BatchError:
        await _stop(workers)
        raise
    finally:
        if sink is not None:
            sink.close()
    return results


async def _stop(workers: list[asyncio.Task[None]]) -> None:
    for task in workers:
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)


def _open_sink(out: Path) -> TextIO:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # backslashreplace: a lone surrogate (a model can send "\ud800") can only sit inside
        # a JSON string, where its \uXXXX escape is valid JSON and reads back the same.
        sink = out.open("a", encoding="utf-8", errors="backslashreplace")
        if out.stat().st_size > 0:
            with out.open("rb") as f:
                f.seek(-1, 2)
                if f.read(1) != b"\n":
                    sink.write("\n")  # a line cut by a kill must not swallow the next result
    except OSError as e:
        raise BatchError(f"cannot write results to {out}: {e}") from None
    return sink


async def _run_item(source: Any, item: BatchItem,
                    session_for: Callable[[BatchItem], SessionLike] | None = None) -> ItemResult:
    started = time.perf_counter()
    results: list[RunResult] = []
    error: str | None = None
    agent: Agent | None = None
    session: SessionLike | None = None
    own = not isinstance(source, Agent)
    try:
        if own:
            made = source()
            agent = await made if inspect.isawaitable(made) else made
        else:
            agent = source
        assert agent is not None
        if session_for is not None:
            session = session_for(item)
        conversation = Conversation() if session is None else None
        for turn in item.turns:
            # Run's requests (not streamed), and its result even when the provider fails.
            result = await final_result(run_events(agent, turn, conversation=conversation,
                                                   session=session, stream_requests=False))
            results.append(result)
            if result.stop_cause != StopCause.COMPLETED:
                break
    except asyncio.CancelledError:
        raise
    except Exception as e:  # one item's failure is its result line, not the batch's end
        error = f"{type(e).__name__}: {e}"
    finally:
        if own and agent is not None:
            await agent.aclose()
    ran = summed(results) if results else None
    if error is None and ran is not None and ran.error is not None:
        error = f"{type(ran.error).__name__}: {ran.error}"
    stop = str(ran.stop_cause) if ran is not None else None
    ok = error is None and stop == "completed"
    if ran is None:
        return ItemResult(item.id, ok, "", error, stop, Usage(), CLEAN, 0, 0, 0, 0,
                          time.perf_counter() - started, item.meta, getattr(session, "id", None))
    return ItemResult(item.id, ok, ran.text, error, stop, ran.usage, ran.taint,
                      ran.blocked_sends, sum(r.denied or r.blocked for r in ran.tool_calls),
                      len(ran.tool_calls), ran.turns, time.perf_counter() - started, item.meta,
                      getattr(session, "id", None))


def summarize(results: Sequence[ItemResult]) -> dict[str, Any]:
    """Counts and token totals of a batch's results (for hosts using the Python API)."""
    usage = Usage()
    for r in results:
        usage = usage + r.usage
    return {"ok": sum(r.ok for r in results), "failed": sum(not r.ok for r in results),
            "usage": usage_to_dict(usage)}


__all__ = [
    "BatchError",
    "BatchItem",
    "BatchProgress",
    "ItemResult",
    "drive_batch",
    "finished_ids",
    "item_from_value",
    "plan_batch",
    "read_items",
    "run_batch",
    "summarize",
]
