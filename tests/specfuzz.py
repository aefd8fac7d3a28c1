"""Hostile spec documents: valid specs mutated the way a fuzzer (or a careless user) would.

``spec_texts()`` draws the text of a JSON or TOML spec file, with its suffix:
valid specs of a few tokens, then mutations — wrong types, numbers at and past the
caps, deep nesting, odd unicode (surrogates, control characters, BOMs) in names and
token texts, TOML quirks, repeated keys, every divisor form, policy tables with modifiers
at extreme magnitudes (sinks of 1e3000, soft-caps of 1e-3).  ``FLAG_VALUES`` are option
values as a user types them, negative exponent forms among them.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

NUMBER_TEXTS = st.sampled_from([
    "0", "1", "-1", "1/2", "-0.75", "3", "1e2", "1e-2", "2.5e3", "1/3", "0.1", "-7/9",
    "1e200", "-1e200", "6e1000", "4e1000", "1e4000", "1e-4000", "9" * 3999, "1e4001",
    "1" * 4001, "1/0", "nan", "inf", "-inf", "", " ", "abc", "1//2", "0x10", "1_000",
    "1e2200", "1e-2200", "0.0000005", "300", "10000000000000000000000",
])
ODD_TEXTS = st.sampled_from([
    "\ud800", "a\u0001b", "\ufeff", "\u202e", "é", "\x00", "<&>", "\\", "'", '"', "\n",
    "𝔘", "a" * 300,
])
DIVISORS = st.sampled_from([
    None, "none", "2", "sqrt(2)", "sqrt(3)", "1e-4000", "sqrt(1e-4000)", "1e400", "0",
    "-1", "sqrt(-2)", "1/2", "sqrt(1/2)", "abc", 0, 2, 0.5, True, [], {}, "sqrt()",
])


#: a head spec's policy table with modifiers at ordinary and extreme magnitudes
POLICIES = st.fixed_dictionaries({}, optional={
    "softcap": st.sampled_from(["1/10", "1/2", "30", "1e-3", "1e3", "1e200", "-1", "0", "5e10"]),
    "sink": st.sampled_from(["0", "-1e3", "1e3", "40", "200", "-200", "1e10", "1e20", "-1e200",
                             "1e3000", "1/3"]),
    "alibi": st.sampled_from([{"heads": 8}, {"heads": 12, "form": "symmetric"},
                              {"heads": 3, "form": "absolute"}, {"heads": 0}]),
    "head": st.integers(0, 3),
    "rope": st.sampled_from([{"theta": "10000"}, {"theta": "10000", "layout": "interleaved"},
                             {"theta": "1"}, {"theta": "1e3000"}]),
    "window": st.sampled_from([[1, 0], [2, 2], [0, 0], [None, 1]]),
    "query_offset": st.integers(0, 3),
    "lse": st.booleans(),
})
#: option values a user types after a flag, negative exponent forms among them
FLAG_VALUES = st.sampled_from(["-1e3", "-2.5e-1", "-1/2", "-.5", "1e3", "40", "1e10", "1e3000",
                               "-1e3000", "0", "1/10", "abc", ""])


def _numbers(width: int):
    plain = st.one_of(st.integers(-9, 9), NUMBER_TEXTS,
                      st.fractions(max_denominator=9).map(str))
    return st.lists(plain, min_size=width, max_size=width)


@st.composite
def valid_specs(draw) -> dict:
    """A small valid head spec: 1..8 tokens of width 1..4, either layout."""
    d = draw(st.integers(1, 4))
    n = draw(st.integers(1, 8))
    layout = draw(st.sampled_from(["slots", "rows"]))
    small = st.lists(st.integers(-3, 3).map(str) | st.sampled_from(["1/2", "-1/3", "0.25"]),
                     min_size=d, max_size=d)
    doc = {"tokens": [{"x": draw(small)} for _ in range(n)],
           "W_Q": [draw(small) for _ in range(d)], "W_K": [draw(small) for _ in range(d)],
           "W_V": [draw(small) for _ in range(d)]}
    if layout == "rows":
        doc["layout"] = "rows"
    if draw(st.booleans()):
        doc["causal"] = draw(st.sampled_from([True, False, 1, "yes", None]))
    return doc


def _junk():
    return st.recursive(
        st.none() | st.booleans() | st.integers() | NUMBER_TEXTS | ODD_TEXTS,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
            st.sampled_from(["x", "text", "id", "W_Q", "zz"]), inner, max_size=3),
        max_leaves=8)


@st.composite
def mutated_specs(draw) -> dict:
    """A valid spec with a few hostile changes."""
    doc = draw(valid_specs())
    for _ in range(draw(st.integers(1, 3))):
        tokens = [t for t in doc.get("tokens", []) if isinstance(t, dict)] \
            if isinstance(doc.get("tokens"), list) else []
        kind = draw(st.sampled_from(["number", "text", "divisor", "junk", "drop", "extra",
                                     "width", "id", "big", "policy", "name"]))
        if kind in ("text", "width", "id") and not tokens:
            continue
        if kind == "number":
            key = draw(st.sampled_from(["tokens", "W_Q", "W_K", "W_V"]))
            rows = [t.get("x") for t in tokens] if key == "tokens" else doc.get(key)
            rows = [r for r in rows if isinstance(r, list) and r] \
                if isinstance(rows, list) else []
            if rows:
                row = draw(st.sampled_from(rows))
                row[draw(st.integers(0, len(row) - 1))] = draw(NUMBER_TEXTS)
        elif kind == "text":
            draw(st.sampled_from(tokens))["text"] = draw(ODD_TEXTS)
        elif kind == "policy":
            doc["policy"] = draw(POLICIES)
        elif kind == "name":
            doc["name"] = draw(ODD_TEXTS)
        elif kind == "divisor":
            doc["divisor"] = draw(DIVISORS)
        elif kind == "junk":
            doc[draw(st.sampled_from(["tokens", "W_Q", "W_K", "W_V", "layout", "name",
                                      "causal"]))] = draw(_junk())
        elif kind == "drop":
            doc.pop(draw(st.sampled_from(sorted(doc))), None)
        elif kind == "extra":
            doc[draw(st.sampled_from(["policy", "bias", "W_O", "Tokens"]))] = draw(_junk())
        elif kind == "width":
            t = draw(st.sampled_from(tokens))
            x = t.get("x") if isinstance(t.get("x"), list) else []
            t["x"] = x + ["1"] if draw(st.booleans()) else x[:-1]
        elif kind == "id":
            draw(st.sampled_from(tokens))["id"] = draw(_junk())
        elif isinstance(doc.get("W_V"), list) and doc["W_V"] and \
                isinstance(doc["W_V"][0], list):
            doc["W_V"] = [draw(_numbers(max(len(doc["W_V"][0]), 1))) for _ in doc["W_V"]]
    return doc


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)   # a TOML basic string reads the same
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(e) for e in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(e)}" for k, e in v.items()) + "}"
    return '"null"'


def _to_toml(doc: dict) -> str:
    lines = []
    for k, v in doc.items():
        if v is None:
            continue
        lines.append(f"{json.dumps(k)} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


@st.composite
def spec_texts(draw) -> tuple[str, str]:
    """``(text, suffix)`` of a hostile spec file."""
    doc = draw(st.one_of(valid_specs(), mutated_specs(), mutated_specs()))
    form = draw(st.sampled_from(["json", "json", "toml", "deep", "bom", "repeat", "bare",
                                 "truncated", "toml-quirk"]))
    if form == "toml":
        return _to_toml(doc), ".toml"
    text = json.dumps(doc, ensure_ascii=False)
    if form == "deep":
        depth = draw(st.sampled_from([50, 1000, 3000, 100000]))
        return text[:-1] + ', "name": ' + "[" * depth + "]" * depth + "}", ".json"
    if form == "bom":
        return "\ufeff" + text, ".json"
    if form == "repeat":
        return text[:-1] + ', "W_Q": [[1]]}', ".json"
    if form == "bare":       # bare decimal literals, read from their text
        return text.replace('"1/2"', "0.5").replace('"1e200"', "1e200").replace(
            '"6e1000"', "6e1000").replace('"1e-4000"', "1e-4000"), ".json"
    if form == "truncated":
        return text[:draw(st.integers(0, max(len(text) - 1, 0)))], ".json"
    return (_to_toml(doc).replace('"1/2"', "0.5").replace('"0.25"', "2_5e-2")
            + draw(st.sampled_from(["", "x = 1_000.5\n", "inf_ = inf\n", "[tokens]\n"])),
            ".toml")
