"""Tracing costs a turn what its new sources cost (tether.provenance): the haystack of a
turn's sources extends the one of the turn before when the conversation only grew, and
answers exactly as a haystack made from scratch does; sources that do not begin with the
earlier ones (a summary replaced a message, another run) are indexed whole again. The
index a value is looked up in finds exactly the texts ``_occurs`` says hold it."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator

import pytest

from tether import Agent, Capabilities, tokens, tool
from tether.messages import FieldLabel
from tether.provenance import SYSTEM_PROMPT, Source, _Haystack, trace_value
from tether.providers import Scripted, call
from tether.tokens import Index, occurs

# Values that occur as whole tokens, as pieces of longer ones, across two texts (a value
# holding the newline that joins them), in trusted fields of untrusted results, nowhere.
VALUES: tuple[str | int | float, ...] = (
    "bob@corp.test", "mallory@evil.test", "corp.test", "alpha", "alpha\nbeta", "beta",
    "end", "end\nstart", "start", "id-7", "id-17", "inv-3", "Summary", 7, 17, 100, 100.0,
    250.5, "rain then sun", "nowhere at all", "a", "\n",
)


def _source(i: int) -> Source:
    """The i-th source of a long conversation: texts that end and start with the same
    words (a match across the join is no match), results with trusted fields."""
    kind = i % 5
    if kind == 0:
        return Source("the user's prompt", f"Send {i} to bob@corp.test: alpha", True)
    if kind == 1:
        return Source(f"r{i}", f"beta page {i}: rain then sun, id-{i} end", False,
                      fields=(FieldLabel(".id", f"id-{i}", "service"),
                              FieldLabel(".note", "mallory@evil.test", "others")))
    if kind == 2:
        return Source(f"r{i}", f"start Summary {i} of corp.test, 100 alpha", True)
    if kind == 3:
        return Source(f"r{i}", "", False)  # an empty result
    return Source(f"r{i}", f"inv-{i % 7} 250.50 mallory@evil.test", False,
                  fields=(FieldLabel(".invoice", f"inv-{i % 7}", "user"),))


def _fresh(value: str | int | float, sources: tuple[Source, ...]) -> tuple[
        tuple[str, ...], tuple[str, ...]]:
    # A list is never cached: its haystack is made from scratch.
    return trace_value(value, list(sources))


def _turns(count: int, system: str = "Be brief.") -> Iterator[tuple[Source, ...]]:
    """A conversation's sources turn by turn, the system prompt's made anew each turn (as
    ``SourceIndex.sources`` makes it): equal, not the same object."""
    grown: list[Source] = []
    for i in range(count):
        grown.extend(_source(i * 3 + k) for k in range(i % 3 + 1))
        yield (Source(SYSTEM_PROMPT, system, True), *grown)


def _fields(hay: _Haystack) -> tuple[object, ...]:
    spellings = [str(v) for v in VALUES]
    return (hay.index.texts[:hay.index.count], hay.fields,
            hay.field_index.texts[:hay.field_index.count],
            [hay.holders(v) for v in spellings], [hay.field_holders(v) for v in spellings])


@pytest.mark.parametrize(("before", "after"), [(0, 0), (0, 4), (3, 0), (1, 1), (6, 9)])
def test_an_extended_haystack_is_the_one_made_of_all_its_sources(before: int,
                                                                 after: int) -> None:
    first = tuple(_source(i) for i in range(before))
    more = tuple(_source(i) for i in range(before, before + after))
    assert _fields(_Haystack(first).extended(more)) == _fields(_Haystack(first + more))


def test_a_growing_conversation_traces_as_a_fresh_haystack_does() -> None:
    for sources in _turns(40):
        for value in VALUES:
            assert trace_value(value, sources) == _fresh(value, sources), (value, sources)


def test_sources_that_no_longer_begin_with_the_last_turns_are_traced_afresh() -> None:
    *_, sources = _turns(12)
    for value in VALUES:
        trace_value(value, sources)
    # The fitter summarised: an early result replaced by a summary, the rest as before.
    summary = Source("a summary", "Summary: bob@corp.test was paid id-99", False,
                     fields=(FieldLabel(".id", "id-99", "service"),))
    changed = (*sources[:2], summary, *sources[4:], _source(999))
    # Fewer sources, and a different system prompt: neither begins with the last turn's.
    shorter = sources[:5]
    other_system = (Source(SYSTEM_PROMPT, "Be thorough.", True), *sources[1:])
    trusted_now = (sources[0], Source(sources[1].name, sources[1].text, True),
                   *sources[2:])
    for case in (changed, shorter, other_system, trusted_now, sources):
        for value in (*VALUES, "id-99", "Summary:"):
            assert trace_value(value, case) == _fresh(value, case), (value, case)
    assert trace_value("id-99", changed)[0]  # the summary's service-written field
    assert trace_value("inv-4", sources)[0]  # a user-written field of a replaced result:
    assert not trace_value("inv-4", changed)[0]  # gone with it


def test_runs_side_by_side_each_trace_as_a_fresh_haystack_does() -> None:
    # Turns of three conversations taken in turn (a batch): each extends its own haystack.
    runs = [_turns(25, system) for system in ("one", "two", "three")]
    for sources in itertools.chain.from_iterable(zip(*runs, strict=True)):
        for value in VALUES:
            assert trace_value(value, sources) == _fresh(value, sources)


# Texts of the characters the token rule turns on: breaks before a token, ends after one,
# sentence punctuation, and letters that make words and addresses.
_ALPHABET = "ab.c@ x-()[]!?,;:\n\"'<>#$1"


def test_the_index_finds_exactly_the_texts_a_value_occurs_in_as_a_whole_token() -> None:
    rng = random.Random(7)
    for _ in range(200):
        texts = ["".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(0, 30)))
                 for _ in range(rng.randrange(1, 8))]
        index = Index().extended(texts[:2]).extended(texts[2:])
        needles = {t[i:j] for t in texts for i in range(len(t)) for j in range(i + 1,
                   min(len(t), i + 8) + 1)}
        needles |= {"".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(1, 5)))
                    for _ in range(20)}
        for needle in needles:
            want = [i for i, t in enumerate(texts) if occurs(needle, t)]
            assert index.holders(needle) == want, (needle, texts)


def test_an_index_extended_two_ways_keeps_each_way_apart() -> None:
    # Two conversations that share a beginning (a run and its retry after a summary): the
    # second extension copies, and neither sees the other's texts.
    base = Index().extended(["alpha beta"])
    one = base.extended(["gamma"])
    two = base.extended(["delta"])
    assert one.holders("gamma") == [1] and one.holders("delta") == []
    assert two.holders("delta") == [1] and two.holders("gamma") == []
    assert base.holders("gamma") == base.holders("delta") == []


def test_a_long_run_indexes_each_source_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Through the real Agent and gate: every call is traced against every text the model
    # has seen, and each text is indexed once, however many turns follow.
    joined: list[str] = []
    keys_of = tokens._keys

    def counting(text: str) -> set[str]:
        joined.append(text)
        return keys_of(text)

    monkeypatch.setattr(tokens, "_keys", counting)

    @tool(capabilities=Capabilities(untrusted_input=True))
    def read_page(n: int) -> str:
        """Read page n of the news."""
        return f"Page {n}: light rain, then sun. Tracking id pg-{n}."

    @tool(capabilities=Capabilities(external_send=True), destination_params=["to"],
          content_params=["body"])
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        return "sent"

    turns = 30
    script = [step for n in range(turns) for step in (
        call("read_page", n=n), call("send_email", to="bob@corp.test", body=f"Gist {n}"))]
    agent = Agent(Scripted([*script, "done"]), [read_page, send_email], max_turns=3 * turns)
    result = asyncio.run(agent.run("Read the news and mail each page's gist to "
                                   "bob@corp.test."))
    assert result.stop_cause == "completed", result.error
    assert all(r.status == "ok" for r in result.tool_calls)
    pages = [t for t in joined if "Page " in t]
    assert len(pages) == turns and len(set(pages)) == turns  # each page once
