"""Reading a case file: YAML (``.yaml``/``.yml``, with pyyaml: the ``eval`` extra) or JSONL
(one case a line), validated strictly into a ``Suite``. A bad file is an ``EvalError``
naming the file, the line, the case and the field, before anything runs.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tether.config.tool_files import split_reference
from tether.eval.cases import Case, EvalError, Suite
from tether.messages import loads_bounded

Loc = tuple[str | int, ...]
_MAX_ERRORS = 5
# Places a YAML file may hold, aliases expanded: a few aliases of aliases (a "billion
# laughs" file) would otherwise make checking it take for ever.
MAX_PLACES = 200_000


def load_suite(path: str | Path) -> Suite:
    """The suite in ``path`` (YAML or JSONL, by its extension; ``.json`` is read as one
    YAML document, which JSON is), its tools files resolved against the file's folder."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise EvalError(f"cannot read {path}: {e.strerror or e}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise EvalError(f"{path}: the file is UTF-16; a case file must be UTF-8")
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    if path.suffix.lower() == ".jsonl":
        value, lines = _jsonl(path, data)
    else:
        value, lines = _yaml(path, _text(path, data))
    suite = suite_from_value(value, where=str(path), lines=lines)
    return _resolved(suite, path.parent)


def suite_from_value(value: Any, *, where: str = "cases",
                     lines: Mapping[Loc, int] | None = None) -> Suite:
    """A ``Suite`` from plain data: ``{"cases": [...], "repeat": N}`` or a list of cases;
    ``lines`` maps a place in ``value`` to its line in the file, for the errors."""
    if isinstance(value, list):
        value = {"cases": value}
    if not isinstance(value, dict):
        raise EvalError(f"{where}: expected a list of cases, or a mapping with \"cases\", not "
                        f"{type(value).__name__}")
    try:
        return Suite.model_validate(value)
    except ValidationError as e:
        raise EvalError(_explain(e, value, where, lines or {})) from None


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise EvalError(f"{path} line {line}: not UTF-8 (byte 0x{data[e.start]:02x}); a case "
                        f"file must be UTF-8") from None


def _jsonl(path: Path, data: bytes) -> tuple[Any, dict[Loc, int]]:
    cases: list[Any] = []
    lines: dict[Loc, int] = {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = _text(path, raw) if raw.strip() else ""
        if not line.strip():
            continue
        try:
            value = loads_bounded(line)
        except ValueError as e:
            raise EvalError(f"{path} line {number}: not JSON ({e}); each line is one case, a "
                            f"JSON object") from None
        lines[("cases", len(cases))] = number
        cases.append(value)
    if not cases:
        raise EvalError(f"{path}: no cases (one JSON object a line)")
    return {"cases": cases}, lines


def _yaml(path: Path, text: str) -> tuple[Any, dict[Loc, int]]:
    try:
        import yaml  # type: ignore[import-untyped]  # the eval extra: YAML case files only
    except ImportError:
        raise EvalError(f"{path}: reading YAML needs pyyaml (pip install 'tether[eval]'), or "
                        f"write the cases as JSONL (one JSON object a line)") from None
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        lines: dict[Loc, int] = {}
        if node is not None:
            _walk(node, (), lines, path, [0])
        value = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path} line {mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise EvalError(f"{where}: not YAML ({problem})") from None
    except RecursionError:
        raise EvalError(f"{path}: nested too deeply") from None
    finally:
        loader.dispose()
    if value is None:
        raise EvalError(f"{path}: no cases (the file is empty)")
    return value, lines


def _walk(node: Any, loc: Loc, lines: dict[Loc, int], path: Path, count: list[int]) -> None:
    """Each place's line (1-based), and a key given twice in a mapping refused (YAML keeps
    the last silently: a check written twice would be half lost)."""
    count[0] += 1
    if count[0] > MAX_PLACES:
        raise EvalError(f"{path}: more than {MAX_PLACES} values once its aliases are "
                        f"expanded; a case file is not that big")
    kind = getattr(node, "id", "")
    lines.setdefault(loc, node.start_mark.line + 1)
    if kind == "mapping":
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen and key != "<<":
                raise EvalError(f"{path} line {key_node.start_mark.line + 1}: key {key!r} "
                                f"appears twice in one mapping")
            seen.add(key)
            _walk(value_node, (*loc, key), lines, path, count)
    elif kind == "sequence":
        for index, item in enumerate(node.value):
            _walk(item, (*loc, index), lines, path, count)


def _explain(error: ValidationError, value: Mapping[str, Any], where: str,
             lines: Mapping[Loc, int]) -> str:
    cases = value.get("cases")
    messages = []
    for item in error.errors(include_url=False)[:_MAX_ERRORS]:
        loc: Loc = tuple(item["loc"])
        line = _line_of(loc, lines)
        place = f"{where} line {line}" if line is not None else where
        head = place
        rest: Loc = loc
        if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int) \
                and isinstance(cases, list) and loc[1] < len(cases):
            head += f": case {_case_name(cases[loc[1]], loc[1])}"
            rest = loc[2:]
        field = _field(rest)
        messages.append(f"{head}: {field + ': ' if field else ''}{_message(item)}")
    more = len(error.errors()) - _MAX_ERRORS
    if more > 0:
        messages.append(f"... and {more} more")
    return "\n".join(messages)


def _case_name(case: Any, index: int) -> str:
    raw = case.get("id") if isinstance(case, dict) else None
    if isinstance(raw, str) and raw.strip():
        return json.dumps(raw, ensure_ascii=True)  # outside text: one line, quoted
    return f"#{index + 1}"


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int | None:
    for end in range(len(loc), -1, -1):
        line = lines.get(loc[:end])
        if line is not None:
            return line
    return None


def _field(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _internal(part):
            continue  # pydantic's name of a union member or a validator, not a key
        else:
            out += f".{part}" if out else part
    return out


def _internal(part: str) -> bool:
    return part in {"str", "int", "float", "bool", "list[str]", "dict[str,any]"} \
        or "[" in part or part.startswith(("function-", "lax-", "json-"))


def _message(item: Mapping[str, Any]) -> str:
    message = str(item.get("msg", "invalid"))
    if item.get("type") == "extra_forbidden":
        return "unknown key (a misspelt expectation would never be checked)"
    return message.removeprefix("Value error, ")


def _resolved(suite: Suite, base: Path) -> Suite:
    cases = [_with_files(case, base) for case in suite.cases]
    return suite.model_copy(update={"cases": cases})


def _with_files(case: Case, base: Path) -> Case:
    if not case.tools_file:
        return case
    return case.model_copy(update={"tools_file": [_resolve(r, base) for r in case.tools_file]})


def _resolve(reference: str, base: Path) -> str:
    target, attr = split_reference(reference)
    if not (target.endswith(".py") or "/" in target or "\\" in target):
        return reference  # an importable module's name
    full = Path(target) if Path(target).is_absolute() else base / target
    return f"{full}:{attr}" if attr else str(full)


__all__ = ["load_suite", "suite_from_value"]
