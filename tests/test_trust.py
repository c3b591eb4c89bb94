"""Taint, the trifecta forecast, and AnswerShape's grammar (property-tested)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import AnswerShape, Capabilities, Taint
from tether.errors import ConfigError
from tether.trust import forecast, is_armed_send, truncate, untrusted_block


def test_taint_only_grows() -> None:
    t = Taint(private=True)
    assert t | Taint() == t
    assert t.after_call(Capabilities(untrusted_input=True), content_from_outside=False) == t
    assert t.after_call(Capabilities(untrusted_input=True),
                        content_from_outside=True) == Taint(True, True)
    # Outside text taints whatever the tool declared: what is shown to the model as
    # untrusted data is untrusted (tether.trust.received decides both).
    assert Taint().after_call(Capabilities(), content_from_outside=True) == Taint(False, True)


def test_forecast_ors_the_capabilities_of_every_call_in_the_turn() -> None:
    turn = [Capabilities(private_data=True), Capabilities(untrusted_input=True)]
    assert forecast(Taint(), turn) == Taint(True, True)
    assert is_armed_send(Capabilities(external_send=True), forecast(Taint(), turn))
    assert not is_armed_send(Capabilities(external_send=True),
                             forecast(Taint(), turn[:1]))


def test_untrusted_block_and_truncate() -> None:
    assert truncate("abc", 10) == "abc"
    assert truncate("a" * 20, 5).startswith("aaaaa\n[... truncated: 15")
    block = untrusted_block("Fetch URL", "hello")
    assert "hello" in block and block.endswith("</untrusted-data>")


# --- AnswerShape -----------------------------------------------------------------------------

NUMBER_PASSES = ["42", "-1", "+3", "0", "3.14", ".5", "5.", "1e10", "1E-3", "2.5e+7",
                 "  42  ", "\n7\t", "007", "-.5e3", "12345678901234567", "1.7976931348623157e308",
                 "5e-324", "-0.000", "1" + "0" * 40]
NUMBER_FAILS = ["", " ", "1,000", "1_000", "0x1A", "$5", "42 apples", "٤٢", "１２", "1e",
                "e5", ".", "+", "--1", "1..2", "1.2.3", "5%", "infinite", "nan!", "1 000",
                "½", "Ⅻ", "4\u200b2", "inf", "-Infinity", "NaN", "nan",
                # bounded: 18 significant digits, exponents past a double's, long spellings
                "123456789012345678", "1.00000000000000001", "1e309", "1e-325",
                "0." + "0" * 70 + "1", "7" * 60]


@pytest.mark.parametrize("text", NUMBER_PASSES)
def test_number_shape_accepts(text: str) -> None:
    assert AnswerShape.number().matches(text)


@pytest.mark.parametrize("text", NUMBER_FAILS)
def test_number_shape_rejects(text: str) -> None:
    assert not AnswerShape.number().matches(text)


@pytest.mark.parametrize("text", ["true", "FALSE", "Yes", " no ", "TrUe"])
def test_boolean_shape_accepts(text: str) -> None:
    assert AnswerShape.boolean().matches(text)


@pytest.mark.parametrize("text", ["y", "n", "1", "0", "on", "off", "Yes!", "yes.", "true false",
                                  "ｙｅｓ", "truE\u0130"])
def test_boolean_shape_rejects(text: str) -> None:
    assert not AnswerShape.boolean().matches(text)


def test_boolean_canonical_value() -> None:
    assert AnswerShape.boolean().canonical(" YES ") == "true"
    assert AnswerShape.boolean().canonical("no") == "false"


def test_one_of_is_exact_after_trim_and_ascii_case_insensitive() -> None:
    shape = AnswerShape.one_of(["low", "medium", "high"])
    assert shape.matches("low") and shape.matches("  HIGH\n") and shape.matches("Medium")
    for text in ["medium-ish", "lo", "low.", "very high", "low high", "", "ＬＯＷ"]:
        assert not shape.matches(text), text
    assert shape.canonical("HIGH") == "high"


def test_one_of_does_not_fold_non_ascii_letters() -> None:
    # "İ".lower() is "i̇": Unicode case folding must not turn a word into an allowed one.
    shape = AnswerShape.one_of(["in"])
    assert not shape.matches("İn") and not shape.matches("ın")


def test_answer_shape_from_config_spelling() -> None:
    assert AnswerShape.parse("number") == AnswerShape.number()
    assert AnswerShape.parse("boolean") == AnswerShape.boolean()
    assert AnswerShape.parse(["a", "b"]) == AnswerShape.one_of(["a", "b"])
    with pytest.raises(ConfigError):
        AnswerShape.parse("string")
    with pytest.raises(ConfigError):
        AnswerShape.parse([])


# A reference implementation written from the grammar in ARCHITECTURE.md as a hand parser
# (not a regex), to check the real one against.

def _reference_number(text: str) -> bool:
    s = _trim(text)
    if len(s) > 64:
        return False
    if s[:1] in ("+", "-"):
        s = s[1:]
    digits = "0123456789"
    i, n = 0, len(s)
    whole = ""
    while i < n and s[i] in digits:
        whole, i = whole + s[i], i + 1
    fraction = ""
    if i < n and s[i] == ".":
        i += 1
        while i < n and s[i] in digits:
            fraction, i = fraction + s[i], i + 1
    if not whole and not fraction:
        return False
    exponent = 0
    if i < n and s[i] in "eE":
        i += 1
        sign = -1 if i < n and s[i] == "-" else 1
        if i < n and s[i] in "+-":
            i += 1
        exp_digits = ""
        while i < n and s[i] in digits:
            exp_digits, i = exp_digits + s[i], i + 1
        if not exp_digits:
            return False
        exponent = sign * int(exp_digits)
    if i != n:
        return False
    # Bounds: significant digits, and the exponent of the first one.
    mantissa = (whole + fraction).lstrip("0")
    if not mantissa:
        return True  # zero
    significant = mantissa.rstrip("0")
    first = len(whole.lstrip("0")) - 1 if whole.lstrip("0") else \
        -(len(fraction) - len(fraction.lstrip("0")) + 1)
    return len(significant) <= 17 and -324 <= first + exponent <= 308


def _trim(text: str) -> str:
    return text.strip()


def _reference_boolean(text: str) -> bool:
    lowered = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in _trim(text))
    return lowered in ("true", "false", "yes", "no")


number_like = st.text(alphabet="0123456789+-.eE _,xX$ aInfiNty٤１", max_size=12)


@given(number_like)
def test_number_shape_agrees_with_the_reference_grammar(text: str) -> None:
    assert AnswerShape.number().matches(text) == _reference_number(text)


@given(st.text(max_size=12))
def test_number_shape_agrees_with_the_reference_on_any_text(text: str) -> None:
    assert AnswerShape.number().matches(text) == _reference_number(text)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_python_float_is_a_number_canonicalized_from_its_value(
        value: float) -> None:
    canonical = AnswerShape.number().canonical(repr(value))
    assert canonical is not None and float(canonical) == value


@given(st.integers(min_value=-(10**17) + 1, max_value=10**17 - 1))
def test_every_integer_of_at_most_17_digits_is_itself(value: int) -> None:
    assert AnswerShape.number().canonical(str(value)) == str(value)


@given(st.text(alphabet="0123456789", min_size=18, max_size=60).filter(
    lambda t: len(t.strip("0")) > 17))
def test_a_long_digit_string_is_not_a_number(digits: str) -> None:
    assert not AnswerShape.number().matches(digits)


@pytest.mark.parametrize(("text", "canonical"), [
    (" 7 ", "7"), ("+3", "3"), ("007", "7"), ("-0", "0"), ("0.000", "0"), ("5.", "5"),
    ("3.140", "3.14"), ("2.5E-3", "0.0025"), ("-.5e3", "-500"), ("1e10", "10000000000"),
    ("1" + "0" * 40, "1e+40"), ("1e-7", "1e-7"), ("1.7976931348623157e308",
                                                 "1.7976931348623157e+308"),
])
def test_a_number_crosses_as_its_canonical_value_never_its_raw_digits(
        text: str, canonical: str) -> None:
    assert AnswerShape.number().canonical(text) == canonical


@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_the_canonical_value_is_the_same_number(value: object) -> None:
    from decimal import Decimal

    canonical = AnswerShape.number().canonical(str(value))
    if canonical is not None:
        assert Decimal(canonical) == value
        assert AnswerShape.number().canonical(canonical) == canonical  # a fixed point


@given(st.text(alphabet="tTrRuUeEfFaAlLsSyYnNoO !İı", max_size=7))
def test_boolean_shape_agrees_with_the_reference(text: str) -> None:
    assert AnswerShape.boolean().matches(text) == _reference_boolean(text)


@given(st.lists(st.text(alphabet="abcXYZ-", min_size=1, max_size=4), min_size=1, max_size=4),
       st.text(alphabet="abcXYZ- \n", max_size=6))
def test_one_of_matches_only_an_allowed_word(choices: list[str], text: str) -> None:
    shape = AnswerShape.one_of(choices)
    fold = lambda s: "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in s)  # noqa: E731
    expected = fold(text.strip()) in {fold(c.strip()) for c in choices}
    assert shape.matches(text) == expected


def test_armed_calls_needs_a_leg_from_outside_the_call_itself() -> None:
    from tether.trust import armed_calls

    everything = Capabilities(private_data=True, untrusted_input=True, external_send=True)
    read = Capabilities(private_data=True)
    fetch = Capabilities(untrusted_input=True, external_send=True)
    assert armed_calls(Taint(), [everything]) == [False]
    assert armed_calls(Taint(untrusted=True), [everything]) == [True]
    assert armed_calls(Taint(), [read, fetch]) == [False, True]
    assert armed_calls(Taint(), [fetch]) == [False]
    assert armed_calls(Taint(private=True), [fetch]) == [True]
