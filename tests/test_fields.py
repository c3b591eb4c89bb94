"""Field labels (``tether.fields``), closed vocabularies and the conversation's source index.

What a tool's return type declares becomes labelled values; what a call's schema closes is
not traced; the sources of a conversation are read once per message (issue 29).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel

from tether import Secret, WrittenBy, tool
from tether.closed import closed_paths, defaulted_locations, within
from tether.conversation import Conversation
from tether.fields import MAX_DEPTH, fields_from_schema, fields_of
from tether.messages import FieldLabel, Labels, Message, ToolCall, ToolResult
from tether.provenance import Source, sources_of, trace_value
from tether.tokens import occurs


class Owner(BaseModel):
    email: Annotated[str, WrittenBy.user]
    bio: str


class Doc(BaseModel):
    id: Annotated[int, WrittenBy.service]
    owner: Owner
    tags: Annotated[dict[str, list[str]], WrittenBy.user]
    body: str
    pin: Annotated[str, Secret]


@dataclass
class Card:
    holder: Annotated[str, WrittenBy.user]
    number: Annotated[str, WrittenBy.user, Secret]
    note: str


def test_a_return_types_markers_label_its_values_and_nothing_else() -> None:
    doc = Doc(id=7, owner=Owner(email="me@corp.test", bio="hi"),
              tags={"team": ["a", "b"]}, body="free text", pin="9911")
    assert set(fields_of(doc)) == {
        FieldLabel(".id", "7", "service"),
        FieldLabel(".owner.email", "me@corp.test", "user"),
        FieldLabel(".tags (a key)", "team", "user"),
        FieldLabel(".tags.team[0]", "a", "user"),
        FieldLabel(".tags.team[1]", "b", "user"),
        FieldLabel(".pin", "9911", "others", secret=True),
    }
    assert set(fields_of([Card("Emma", "4000 1234", "n")])) == {
        FieldLabel("[0].holder", "Emma", "user"),
        FieldLabel("[0].number", "4000 1234", "user", secret=True)}


def test_a_marker_does_not_reach_into_a_nested_records_undeclared_fields() -> None:
    class Outer(BaseModel):
        inner: Annotated[Owner, WrittenBy.user]

    assert fields_of(Outer(inner=Owner(email="me@corp.test", bio="anyone's"))) == (
        FieldLabel(".inner.email", "me@corp.test", "user"),)


def test_plain_values_declare_nothing_and_deep_or_huge_values_are_bounded() -> None:
    assert fields_of("text") == fields_of(3) == fields_of(None) == ()
    assert fields_of({"a": "b"}) == ()

    class Deep(BaseModel):
        value: Annotated[list[object], WrittenBy.user]

    nested: object = "x"
    for _ in range(MAX_DEPTH * 2):
        nested = [nested]
    assert fields_of(Deep(value=[nested])) == ()  # deeper than MAX_DEPTH: the untrusted rest
    many = fields_of(Deep(value=list(range(50_000))))
    assert len(many) == 10_000


def test_labels_round_trip_and_a_saved_label_that_is_not_one_is_dropped() -> None:
    labels = Labels(private=True, untrusted=True, why="outside text",
                    fields=(FieldLabel(".id", "7", "service"),
                            FieldLabel(".pin", "9911", secret=True)),
                    echoes=True, written=("x",))
    assert Labels.from_dict(labels.to_dict()) == labels
    saved = labels.to_dict()
    saved["fields"] = [{"path": ".a", "value": "v", "by": "admin"}, {"path": 1},
                       {"path": ".b", "value": {"x": 1}, "by": "user"}, "x"]
    saved["written"] = "not a list"
    read = Labels.from_dict(saved)
    assert read.fields == (FieldLabel(".a", "v", "others"),)
    assert read.written == ()
    # Saved before echoes were recorded: an untrusted result may have been an echo.
    assert Labels.from_dict({"private": False, "untrusted": True}).echoes


def test_a_trusted_field_traces_a_whole_token_the_untrusted_rest_does_not() -> None:
    result = ToolResult("c1", "list", "id: 7, owner: me@corp.test, body: mallory@evil.test",
                        labels=Labels(private=True, untrusted=True, fields=(
                            FieldLabel(".owner", "me@corp.test", "user"),)))
    sources = sources_of([Message("tool", (result,))])
    assert trace_value("me@corp.test", sources)[0]
    assert trace_value("mallory@evil.test", sources) == ((), ("the result of list (c1)",))
    assert trace_value("corp.test", sources) == ((), ())  # a piece of a field: no token


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


def test_closed_vocabularies_of_a_tools_own_schema() -> None:
    @tool
    def configure(mode: Literal["a", "b"], level: Level, maybe: Literal["x"] | None,
                  many: list[Literal["p", "q"]], free: str, either: Literal["a"] | str,
                  count: Literal[1, 2]) -> str:
        """Configure."""
        return ""

    arguments = {"mode": "a", "level": "low", "maybe": "x", "many": ["p", "q"],
                 "free": "a", "either": "a", "count": 2}
    assert closed_paths(arguments, configure.spec.schema_json) == {
        "mode", "level", "maybe", "many[0]", "many[1]", "count"}


def test_a_tools_declared_defaults_are_found_whether_filled_in_or_written() -> None:
    @tool
    def page(path: str, limit: int = 2000, ratio: float = 1.0, order: str = "newest",
             flag: int = 1, skip: int = 0) -> str:
        """Page through a file."""
        return ""

    # limit and ratio are filled in by the signature; order is written, equal to its
    # default (what omitting it does); flag=2 and skip=5 are not the defaults.
    arguments = page.validate({"path": "a.txt", "order": "newest", "flag": 2, "skip": 5})
    assert defaulted_locations(arguments, page.spec.schema_json) == {
        ("limit",), ("ratio",), ("order",)}


def test_a_default_is_the_same_json_value_of_the_same_type() -> None:
    schema = {"properties": {
        "n": {"type": "integer", "default": 1},
        "o": {"type": "object", "default": {"k": ["v"]}},
        "r": {"$ref": "#/$defs/R"}},
        "$defs": {"R": {"type": "object", "properties": {"x": {"default": "deep"}}}}}
    assert defaulted_locations({"n": 1}, schema) == {("n",)}
    assert defaulted_locations({"n": 1.0}, schema) == frozenset()
    assert defaulted_locations({"n": True}, schema) == frozenset()
    assert defaulted_locations({"o": {"k": ["v"]}}, schema) == {("o",)}
    assert defaulted_locations({"o": {"k": ["v", "w"]}}, schema) == frozenset()
    assert defaulted_locations({"r": {"x": "deep", "y": "deep"}}, schema) == {("r", "x")}
    # Every value below a default's place is the default's: its keys and items too.
    assert within(("o", "k", 0), frozenset({("o",)}))
    assert not within(("p", "k"), frozenset({("o",)}))


def test_a_hostile_schema_defaults_nothing_it_does_not_say() -> None:
    looping = {"properties": {"a": {"$ref": "#/$defs/A"}},
               "$defs": {"A": {"$ref": "#/$defs/A", "default": "x"}}}
    assert defaulted_locations({"a": "x"}, looping) == frozenset()
    assert defaulted_locations({"a": "x"}, {"properties": {"a": {"$ref": "http://x"}}}) \
        == frozenset()
    assert defaulted_locations({"a": "x"}, {"properties": "nonsense"}) == frozenset()
    assert defaulted_locations({"a": "x"}, {"properties": {"a": {"default": "y"}}}) \
        == frozenset()


def test_a_hostile_schema_closes_nothing_it_does_not_say() -> None:
    looping = {"properties": {"a": {"$ref": "#/$defs/A"}},
               "$defs": {"A": {"$ref": "#/$defs/A"}}}
    assert closed_paths({"a": "x"}, looping) == frozenset()
    assert closed_paths({"a": "x"}, {"properties": {"a": {"$ref": "http://x"}}}) == frozenset()
    assert closed_paths({"a": "x"}, {"properties": {"a": {"enum": ["y"]}}}) == frozenset()
    assert closed_paths({"a": "x"}, {"properties": {"a": {"anyOf": [{"const": "x"}, {}]}}}) \
        == frozenset()
    assert closed_paths({"a": "x"}, {"properties": "nonsense"}) == frozenset()


def test_a_conversation_reads_each_message_once_and_equals_a_reading_from_scratch() -> None:
    conversation = Conversation()
    conversation.append(Message.user("Mail bob@corp.test."))
    first = conversation.sources("sys")
    assert conversation.sources("sys") == first
    assert conversation.index().sources(conversation.messages) is \
        conversation.index().sources(conversation.messages)  # nothing read again
    conversation.append(Message("assistant", (ToolCall("c1", "mk", '{"name": "evil"}'),)))
    conversation.append(Message("tool", (ToolResult(
        "c1", "mk", "made evil", labels=Labels(untrusted=True, echoes=True, fields=(
            FieldLabel(".name", "evil", "user"),))),)))
    grown = conversation.sources("sys")
    assert grown == sources_of(conversation.messages, "sys")
    # The model wrote "evil" into a call that did not trace: read back, it is not trusted.
    assert trace_value("evil", grown) == ((), ("the result of mk (c1)",))
    assert conversation.index().written == ["name", "evil"]  # keys are values too


def test_tracing_through_the_joined_texts_finds_what_each_text_alone_would() -> None:
    # The haystack joins a turn's texts: a value never matches across two of them, and a
    # source holds it exactly when the text alone holds it as a whole token.
    rng = random.Random(29)
    alphabet = "ab .,\n@:"
    for _ in range(3000):
        sources = tuple(Source(str(i), "".join(rng.choice(alphabet)
                                               for _ in range(rng.randint(0, 12))),
                               rng.random() < 0.5) for i in range(rng.randint(0, 6)))
        needle = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))
        alone = (tuple(s.name for s in sources if s.trusted and occurs(needle, s.text)),
                 tuple(s.name for s in sources if not s.trusted and occurs(needle, s.text)))
        assert trace_value(needle, sources) == alone, (needle, sources)


def test_an_output_schema_labels_structured_content_as_markers_do() -> None:
    schema = {"type": "object", "properties": {
        "id": {"type": "integer", "x-tether-written-by": "service"},
        "owner": {"$ref": "#/$defs/Owner"},
        "tags": {"type": "array", "x-tether-written-by": "user", "items": {"type": "string"}},
        "card": {"type": "string", "x-tether-written-by": "user", "x-tether-secret": True},
        "body": {"type": "string"}},
        "$defs": {"Owner": {"type": "object", "x-tether-written-by": "user", "properties": {
            "email": {"type": "string", "x-tether-written-by": "user"},
            "bio": {"type": "string"}}}}}
    value = {"id": 7, "owner": {"email": "me@corp.test", "bio": "x"}, "tags": ["a"],
             "card": "4000", "body": "anyone's", "extra": "undeclared"}
    assert set(fields_from_schema(value, schema)) == {
        FieldLabel(".id", "7", "service"), FieldLabel(".owner.email", "me@corp.test", "user"),
        FieldLabel(".tags[0]", "a", "user"), FieldLabel(".card", "4000", "user", True)}


def test_a_hostile_output_schema_or_structured_content_labels_nothing_it_does_not_say() -> None:
    deep: object = "x"
    for _ in range(500):
        deep = {"a": deep}
    looping = {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}}
    schema: object
    for schema in ("nonsense", None, [], looping, {"properties": "x"},
                   {"properties": {"a": {"x-tether-written-by": ["user"]}}},
                   {"properties": {"a": {"x-tether-written-by": "root"}}},
                   {"properties": {"a": {"$ref": "https://evil.test/s"}}}):
        assert fields_from_schema({"a": "v"}, schema) == ()
        assert fields_from_schema(deep, schema) == ()
    labelled = {"additionalProperties": {"x-tether-written-by": "user"}}
    assert len(fields_from_schema({str(i): i for i in range(50_000)}, labelled)) == 10_000


def test_a_key_no_schema_declares_is_others_at_any_depth_whatever_is_around_it() -> None:
    person = {"type": "object", "properties": {"email": {"type": "string",
                                                         "x-tether-written-by": "user"}}}
    schema = {"type": "object", "properties": {
        "owner": {**person, "x-tether-written-by": "user"},
        "team": {"type": "array", "x-tether-written-by": "user", "items": person},
        "deep": {"type": "object", "x-tether-written-by": "service", "properties": {
            "inner": {"type": "array", "items": {"type": "array", "items": person}}}},
        "email": {"type": "string", "x-tether-written-by": "user"},
        "map": {"type": "object", "x-tether-written-by": "user",
                "additionalProperties": {"type": "string"}}}}
    evil = "mallory@evil.test"
    value = {"owner": {"email": "me@corp.test", "cc": evil},
             "team": [{"email": "bob@corp.test", "cc": evil}, {"x": {"y": evil}}],
             "deep": {"inner": [[{"email": "al@corp.test", "cc": evil}]], "more": evil},
             "email": {"nested": evil}, "map": {"k": "v", "x": {"y": evil}}}
    labelled = fields_from_schema(value, schema)
    assert evil not in {f.value for f in labelled}
    assert {f.value for f in labelled} == {"me@corp.test", "bob@corp.test", "al@corp.test",
                                           "k", "v", "x"}


def test_a_label_beside_a_ref_narrows_its_targets_and_never_widens_it() -> None:
    schema = {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/User", "x-tether-written-by": "others"},
        "b": {"$ref": "#/$defs/Service", "x-tether-written-by": "user"},
        "c": {"$ref": "#/$defs/User", "x-tether-written-by": "service"},
        "d": {"$ref": "#/$defs/Plain", "x-tether-written-by": "service"},
        "e": {"$ref": "#/$defs/Hop", "x-tether-secret": True},
        "f": {"$ref": "#/$defs/Hop"}},
        "$defs": {"User": {"type": "string", "x-tether-written-by": "user"},
                  "Service": {"type": "string", "x-tether-written-by": "service"},
                  "Plain": {"type": "string"},
                  "Hop": {"$ref": "#/$defs/User", "x-tether-written-by": "others"}}}
    value = dict.fromkeys("abcdef", "v")
    assert {(f.path, f.by, f.secret) for f in fields_from_schema(value, schema)} == {
        (".b", "user", False), (".c", "user", False), (".d", "service", False),
        (".e", "others", True)}


def test_one_ref_walker_reads_schemas_for_labels_and_closed_vocabularies() -> None:
    from tether import refs

    root = {"$defs": {"A": {"$ref": "#/$defs/B", "enum": ["x"]}, "B": {"type": "string"},
                      "a/b": {"const": 1}}}
    assert refs.resolved({"$ref": "#/$defs/A"}, root) == {"type": "string", "enum": ["x"]}
    assert refs.resolved({"$ref": "#/$defs/a~1b"}, root) == {"const": 1}
    assert refs.chain({"$ref": "#/$defs/Nope"}, root) is None
    long = {"$defs": {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(40)}}
    assert refs.chain({"$ref": "#/$defs/D0"}, long) is None  # too many hops: nothing
    # Beside a $ref, an enum closes the value for the gate as the target's would.
    sibling = {"properties": {"a": {"$ref": "#/$defs/B", "enum": ["x"]}},
               "$defs": {"B": {"type": "string"}}}
    assert closed_paths({"a": "x"}, sibling) == {"a"}


def test_closed_vocabularies_of_maps_and_at_any_depth() -> None:
    @tool
    def configure(flags: dict[str, Literal["on", "off"]],
                  nested: list[dict[str, list[Literal[1, 2]]]],
                  free: dict[str, str]) -> str:
        """Configure."""
        return ""

    arguments = {"flags": {"a": "on", "a.b": "off"}, "nested": [{"k": [1, 2]}],
                 "free": {"x": "on"}}
    assert closed_paths(arguments, configure.spec.schema_json) == {
        "flags.a", "flags.a.b", "nested[0].k[0]", "nested[0].k[1]"}


def test_an_id_others_name_beside_a_kind_or_id_word_is_theirs_prose_numbers_are_not() -> None:
    from tether.provenance import ids_words, in_others_text, is_short, kinds_of

    words = ids_words("delete_file", "file_id")
    listing = Source("the result of list_files (c1)", "id: '13'\nJune 13: beach\n13. Serve",
                     False, fields=(FieldLabel("[0].id", "13", "service"),), tool="list_files")
    assert in_others_text("13", [listing], words) == ()
    for said in ("Delete the file with ID 13.", '{"file_id": "13"}', "delete 13 now", "#13",
                 "files 13 and 14"):
        named = Source("the result of read_inbox (c2)", said, False)
        assert in_others_text("13", [listing, named], words) == (named.name,), said
    assert kinds_of("delete_file", "file_id") == {"file"} == kinds_of("list_files", "[0].id")
    assert kinds_of("get_day_calendar_events", "[2].id_") == {"calendar", "event"}
    assert all(is_short(v) for v in (13, 2.5, "5550100", "+1 (555) 010-0100", "12345678901"))
    assert not any(is_short(v) for v in ("f13", "2024-05-20 10:00", "", "abc"))
