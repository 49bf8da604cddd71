"""The strict plan YAML reader: every refusal is one short PlanReadError, every plan loads as before."""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backfill_assets.errors import PlanReadError
from backfill_assets.yaml_document import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_PLAN_BYTES,
    read_yaml_file,
    read_yaml_text,
)
from tests.plans import complete_plan

ROOT = Path(__file__).resolve().parents[1]

REALISTIC = """\
# Replay plan for the refund double-count incident.
plan_id: revenue-refund-fix   # lowercase id
owner: olivia
reason: >
  refunds were counted twice
  in daily_revenue since the 2025-12 release

target: daily_revenue
window: {start: 2026-01-01, end: 2026-01-06}
source_of_truth: orders
downstream:
  - asset: published_revenue
    owners: [finance-bi, "#revenue-consumers"]
execution:
  mode: overwrite
  idempotency: 'each partition is deleted and re-inserted: one transaction'
  business_keys:
    - order_date
    - region
  max_concurrent_partitions: 2
  proof_partitions: [2026-01-02]
  allow_empty_partitions: false
publish:
  pause: yes          # YAML 1.1 would make this a bool; the model must see the text
  notify: []
checks:
  metrics:
    - {name: net_revenue, tolerance_pct: 0.01}
    - name: orders
      tolerance_pct: 0
approvals:
  required: 2
  granted: []
"""

REALISTIC_EXPECTED: dict[str, Any] = {
    "plan_id": "revenue-refund-fix",
    "owner": "olivia",
    "reason": "refunds were counted twice in daily_revenue since the 2025-12 release\n",
    "target": "daily_revenue",
    "window": {"start": "2026-01-01", "end": "2026-01-06"},
    "source_of_truth": "orders",
    "downstream": [{"asset": "published_revenue", "owners": ["finance-bi", "#revenue-consumers"]}],
    "execution": {
        "mode": "overwrite",
        "idempotency": "each partition is deleted and re-inserted: one transaction",
        "business_keys": ["order_date", "region"],
        "max_concurrent_partitions": 2,
        "proof_partitions": ["2026-01-02"],
        "allow_empty_partitions": False,
    },
    "publish": {"pause": "yes", "notify": []},
    "checks": {
        "metrics": [
            {"name": "net_revenue", "tolerance_pct": 0.01},
            {"name": "orders", "tolerance_pct": 0},
        ]
    },
    "approvals": {"required": 2, "granted": []},
}


def refusal(text: str, source: str = "plans/p.yaml") -> str:
    """The message of the PlanReadError the text must raise; always one short line."""
    with pytest.raises(PlanReadError) as info:
        read_yaml_text(text, source)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert "\n" not in message and message.startswith(f"{source}: ")
    assert info.value.fix, "every refusal says how to fix it"
    assert len(message) < 300, message
    return message


def billion_laughs(levels: int = 9) -> str:
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    names = "abcdefghijklmnop"
    for prev, name in zip(names[: levels - 1], names[1:levels], strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# ---- documents that load ------------------------------------------------------------------------


def test_realistic_plan_with_comments_flow_lists_and_folded_scalar_loads() -> None:
    assert read_yaml_text(REALISTIC, "plans/p.yaml") == REALISTIC_EXPECTED


def test_template_and_dumped_plan_load_like_safe_load() -> None:
    template = (ROOT / "templates" / "backfill-plan.yaml").read_text(encoding="utf-8")
    assert read_yaml_text(template, "t") == yaml.safe_load(template)
    plan = complete_plan()
    assert read_yaml_text(yaml.safe_dump(plan, sort_keys=False), "p") == plan


@pytest.mark.parametrize(
    ("scalar", "expected"),
    [
        ("", None), ("~", None), ("null", None), ("NULL", None),
        ("true", True), ("False", False), ("TRUE", True), ("tRuE", True),
        ("0", 0), ("-17", -17), ("+3", 3), ("007", 7),
        ("123456789012345678901234567890", 123456789012345678901234567890),
        ("1.5", 1.5), ("-0.25", -0.25), ("1e3", 1000.0), (".5", 0.5), ("2.", 2.0),
        (".inf", math.inf), ("-.Inf", -math.inf),
        ("2026-01-05", "2026-01-05"), ("2026-02-30", "2026-02-30"),
        ("2026-01-05T10:00:00Z", "2026-01-05T10:00:00Z"),
        ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("Y", "Y"),
        ("0x1F", "0x1F"), ("0o17", "0o17"), ("0b101", "0b101"), ("1_000", "1_000"),
        ("12:30:00", "12:30:00"), ("nan", "nan"), ("inf", "inf"), ("NoneType", "NoneType"),
        ("'true'", "true"), ('"5"', "5"), ("''", ""), ('"null"', "null"), ("'2026-01-05'", "2026-01-05"),
        ("\u0661\u0662", "\u0661\u0662"),  # Arabic-Indic digits: int() would accept them
    ],
)
def test_scalars_resolve_like_the_yaml_core_schema(scalar: str, expected: Any) -> None:
    value = read_yaml_text(f"v: {scalar}\n", "p")["v"]
    assert value == expected and type(value) is type(expected)


def test_nan_is_a_float() -> None:
    assert math.isnan(read_yaml_text("v: .nan\n", "p")["v"])


def test_block_scalars_are_text() -> None:
    assert read_yaml_text("a: |\n  5\n  x\nb: >-\n  true\n", "p") == {"a": "5\nx\n", "b": "true"}


def test_bom_explicit_start_and_end_markers_are_fine(tmp_path: Path) -> None:
    assert read_yaml_text("---\na: 1\n...\n", "p") == {"a": 1}
    path = tmp_path / "p.yaml"
    path.write_bytes(b"\xef\xbb\xbfowner: \xc3\xa9lodie\n")
    assert read_yaml_file(path) == {"owner": "\u00e9lodie"}


# ---- anchors, aliases, merge keys, tags ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["a: &x 1\nb: *x\n", "a: &x 1\n", "a: 1\nb: [1, *x]\n", "&top\na: 1\n", "a: &x {b: 1}\n"],
)
def test_anchors_and_aliases_are_refused(text: str) -> None:
    assert "anchors and aliases are not allowed in a plan (line" in refusal(text)


def test_billion_laughs_is_refused_fast_with_a_short_message() -> None:
    bomb = billion_laughs(9)
    started = time.perf_counter()
    message = refusal(bomb)
    assert time.perf_counter() - started < 0.5
    assert "anchors and aliases are not allowed in a plan (line 1)" in message


def test_bomb_under_an_unknown_key_in_a_real_plan_gives_a_short_message() -> None:
    # the same bomb in block style, nested under a key the model would reject as unknown
    lines = ["lol_payload:", "  a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines += [f"  {name}: &{name}"] + [f"    - *{prev}"] * 9
    text = yaml.safe_dump(complete_plan(), sort_keys=False) + "\n".join(lines) + "\n"
    assert 1700 < len(text.encode()) < 2000
    started = time.perf_counter()
    message = refusal(text)
    assert time.perf_counter() - started < 0.5
    assert len(message) < 300 and "anchors and aliases" in message


@pytest.mark.parametrize("text", ["<<: {a: 1}\n", "base: {a: 1}\nchild:\n  '<<': {a: 2}\n"])
def test_merge_keys_are_refused(text: str) -> None:
    assert "merge key `<<`" in refusal(text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a: !!python/object:os.system {}\n", "!!python/object:os.system"),
        ("a: !!python/name:os.system\n", "!!python/name:os.system"),
        ("a: !foo bar\n", "!foo"),
        ("a: !!str 5\n", "!!str"),
        ("a: ! 5\n", "`!`"),
        ("a: !<tag:yaml.org,2002:int> 5\n", "!!int"),
        ("!!str k: v\n", "!!str"),
        ("a: !!seq [1]\n", "!!seq"),
        ("!!map\na: 1\n", "!!map"),
    ],
)
def test_explicit_tags_are_refused(text: str, shown: str) -> None:
    message = refusal(text)
    assert "explicit tag" in message and shown in message and "line 1" in message


def test_exclamation_marks_inside_values_are_text() -> None:
    assert read_yaml_text("a: '!!str'\nb: wow!\n", "p") == {"a": "!!str", "b": "wow!"}


# ---- keys ---------------------------------------------------------------------------------------


def test_duplicate_top_level_key_names_both_lines() -> None:
    text = "plan_id: x\nowner: olivia\n" + "".join(f"k{i}: {i}\n" for i in range(6)) + "owner: mallory\n"
    assert "duplicate key `owner` at line 9 (first at line 2)" in refusal(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("window:\n  start: a\n  end: b\n  start: c\n",
         "duplicate key `window.start` at line 4 (first at line 2)"),
        ("downstream:\n  - asset: a\n    asset: b\n",
         "duplicate key `downstream.0.asset` at line 3 (first at line 2)"),
        ("a: {b: {c: 1, c: 2}}\n", "duplicate key `a.b.c` at line 1 (first at line 1)"),
        ("a: 1\n'a': 2\n", "duplicate key `a` at line 2 (first at line 1)"),
        ("x:\n  - []\n  - {k: 1, k: 2}\n", "duplicate key `x.1.k` at line 3"),
    ],
)
def test_duplicate_keys_are_refused_at_any_depth(text: str, expected: str) -> None:
    assert expected in refusal(text)


def test_same_key_in_different_mappings_is_fine() -> None:
    text = "a: {name: 1}\nb: {name: 2}\nl: [{name: 1}, {name: 2}]\n"
    assert read_yaml_text(text, "p") == {"a": {"name": 1}, "b": {"name": 2}, "l": [{"name": 1}, {"name": 2}]}


def test_a_long_duplicate_key_is_quoted_short_on_one_line() -> None:
    key = "\\u2028" + "k" * 500  # a YAML escape: the decoded key holds a line separator
    message = refusal(f'"{key}": 1\n"{key}": 2\n')
    assert "..." in message and "`\\u2028kkk" in message and len(message) < 250


@pytest.mark.parametrize(
    ("text", "line", "kind"),
    [
        ("a: 1\n5: TODO\n", 2, "int"),
        ("true: x\n", 1, "bool"),
        ("a: 1\nb: 2\nnull: x\n", 3, "null"),
        ("~: x\n", 1, "null"),
        ("? \n: x\n", 1, "null"),
        ("1.5: x\n", 1, "float"),
        ("a:\n  b:\n    -3: x\n", 3, "int"),
        ("{False: 1}\n", 1, "bool"),
    ],
)
def test_non_string_keys_are_refused_naming_the_line(text: str, line: int, kind: str) -> None:
    message = refusal(text)
    assert f"at line {line} is {kind}, not a name" in message


@pytest.mark.parametrize("text", ["[a, b]: x\n", "? [a]\n: x\n", "{a: 1}: x\n", "a:\n  ? - x\n  : y\n"])
def test_collection_keys_are_refused(text: str) -> None:
    assert "a list or mapping is used as a key at line" in refusal(text)


def test_keys_that_only_look_like_other_types_are_strings() -> None:
    text = '"5": a\nyes: b\n2026-01-05: c\n0x1F: d\n"true": e\n'
    assert list(read_yaml_text(text, "p")) == ["5", "yes", "2026-01-05", "0x1F", "true"]


# ---- documents ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "---\n", "--- # c\n...\n", "\ufeff"])
def test_empty_documents_are_refused(text: str) -> None:
    assert "the plan is empty" in refusal(text)


@pytest.mark.parametrize(
    "text",
    ["a: 1\n---\nb: 2\n", "a: 1\n---\n", "---\na: 1\n...\n---\na: 1\n", "a: 1\n--- !!python/object:x\n"],
)
def test_more_than_one_document_is_refused(text: str) -> None:
    assert "more than one YAML document" in refusal(text)


@pytest.mark.parametrize(
    ("text", "kind"), [("- a\n- b\n", "list"), ("just text\n", "str"), ("~\n", "null"), ("5\n", "int")]
)
def test_top_level_must_be_a_mapping(text: str, kind: str) -> None:
    assert f"expected a mapping of plan keys at the top level, found {kind}" in refusal(text)


@pytest.mark.parametrize("text", ["%YAML 1.1\n---\na: 1\n", "%TAG ! tag:x,2000:\n---\na: 1\n",
                                  "a: 1\r%YAML 1." + "1" * 5000 + "\n"])
def test_directives_are_refused_even_with_a_huge_version_number(text: str) -> None:
    # PyYAML int()s the version digits unbounded: 5000 digits raised a bare ValueError
    assert "YAML directive" in refusal(text)


# ---- size, depth and node limits ----------------------------------------------------------------


def nested_lists(depth: int) -> str:
    return "a: " + "[" * (depth - 1) + "x" + "]" * (depth - 1) + "\n"


def test_depth_limit() -> None:
    assert read_yaml_text(nested_lists(MAX_DEPTH), "p")["a"]
    assert f"nested deeper than {MAX_DEPTH} levels (line 1)" in refusal(nested_lists(MAX_DEPTH + 1))
    block = "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 1)) + " " * (MAX_DEPTH + 1) + "x\n"
    assert f"nested deeper than {MAX_DEPTH} levels (line {MAX_DEPTH + 1})" in refusal(block)
    # flow depth is refused while scanning, before PyYAML's simple-key lookahead reaches the `@`
    assert f"nested deeper than {MAX_DEPTH} levels (line 1)" in refusal("a: " + "[" * 40 + "@")


DEEP = 10_000


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * DEEP + "]" * DEEP + "\n",
        "a: " + "{k: " * DEEP + "x" + "}" * DEEP + "\n",
        "a:\n  " + "- " * DEEP + "x\n",
    ],
    ids=["flow-lists", "flow-mappings", "block-lists"],
)
def test_depth_of_ten_thousand_is_a_plan_read_error_not_a_recursion_error(text: str) -> None:
    # valid YAML, so only the depth bound refuses it; a recursive composer hits RecursionError
    started = time.perf_counter()
    assert f"nested deeper than {MAX_DEPTH} levels (line" in refusal(text)
    assert time.perf_counter() - started < 1


def flat_list(items: int) -> str:
    return "a: [" + ", ".join(["1"] * items) + "]\n"


def test_node_limit() -> None:
    # the root mapping, the key and the list are nodes too
    assert len(read_yaml_text(flat_list(MAX_NODES - 3), "p")["a"]) == MAX_NODES - 3
    assert f"more than {MAX_NODES} values (line 1)" in refusal(flat_list(MAX_NODES - 2))


def test_oversized_text_is_refused_before_parsing() -> None:
    text = "a: [" + "x" * MAX_PLAN_BYTES  # malformed too: the size is reported, not the syntax
    assert "larger than 256 KB" in refusal(text)
    multibyte = "a: " + "\u00e9" * (MAX_PLAN_BYTES // 2)  # fewer characters than bytes
    assert "larger than 256 KB" in refusal(multibyte)


def test_300_kb_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a: &x [\n" + b"\xff" * (300 * 1024))  # neither YAML nor UTF-8
    started = time.perf_counter()
    with pytest.raises(PlanReadError, match="larger than 256 KB"):
        read_yaml_file(path)
    assert time.perf_counter() - started < 0.1


def test_huge_integers_stay_ints_up_to_a_bound() -> None:
    assert read_yaml_text("n: " + "9" * 4000 + "\n", "p")["n"] == int("9" * 4000)
    assert "integer at line 2 has more than 4300 digits" in refusal("a: 1\nn: " + "9" * 5000 + "\n")


# ---- malformed input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb: 2\nc: d: e\n", "malformed YAML at line 3, column 5 (mapping values are not allowed here)"),
        ("a: [1, 2\n", "malformed YAML at line 2, column 1"),
        ("a:\n\t- x\n", "malformed YAML at line 2, column 1"),
        ('a: "\\q"\n', "malformed YAML at line 1"),
        ("a: 'open\n", "malformed YAML at line 2"),
    ],
)
def test_malformed_yaml_is_one_line_with_the_mark(text: str, expected: str) -> None:
    assert expected in refusal(text)


def test_control_characters_and_surrogate_escapes_are_refused() -> None:
    assert "character 0x0000 at line 2" in refusal("a: 1\nb: \x00\n")
    assert "lone surrogate escape at line 1" in refusal('a: "\\ud800"\n')


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanReadError, match="no such plan file"):
        read_yaml_file(tmp_path / "missing.yaml")
    with pytest.raises(PlanReadError, match="is a directory"):
        read_yaml_file(tmp_path)
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"a: 1\nowner: \xe9lodie\n")
    with pytest.raises(PlanReadError, match=r"not UTF-8 \(byte 12 on line 2\)"):
        read_yaml_file(latin1)
    dup = tmp_path / "dup.yaml"
    dup.write_text("a: 1\na: 2\n", encoding="utf-8")
    with pytest.raises(PlanReadError, match=re.escape(f"{dup}: duplicate key `a` at line 2")):
        read_yaml_file(dup)


def test_a_file_name_with_a_newline_still_gives_one_line(tmp_path: Path) -> None:
    path = tmp_path / "evil\nname.yaml"
    path.write_text("a: 1\na: 2\n", encoding="utf-8")
    with pytest.raises(PlanReadError) as info:
        read_yaml_file(path)
    assert "\n" not in str(info.value) and "evil\\nname.yaml: duplicate key `a`" in str(info.value)


# ---- properties ---------------------------------------------------------------------------------


def assert_str_keys(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            assert type(key) is str
            assert_str_keys(value)
    elif isinstance(node, list):
        for value in node:
            assert_str_keys(value)


def read_or_refuse(text: str) -> None:
    started = time.perf_counter()
    try:
        document = read_yaml_text(text, "fuzz.yaml")
    except PlanReadError as error:
        assert "\n" not in str(error) and len(str(error)) < 300, str(error)
    else:
        assert type(document) is dict
        assert_str_keys(document)
    assert time.perf_counter() - started < 1


FRAGMENTS = st.one_of(
    st.sampled_from([
        "owner", "window", "start", "<<", "? ", ": ", ":", "- ", ", ", "[", "]", "{", "}", "&a ", "*a", "&b ",
        "*b", "!!python/object:os.system ", "!foo ", "!!str ", "! ", "%YAML 1.1", "%TAG ! x:", "---", "...",
        "|", ">-", "#", "'", '"', "\\", "\\u00e9", "\\ud800", "~", "null", "true", "yes", "2026-02-30",
        ".inf", "0x1F", "1_000", "1e5", "\t", "\r", "\x85", "\u2028", "\ufeff", "\x00", "\u00e9",
        "\U0001f600", "  ", "\n", "\n  ", "\n    - ",
    ]),
    st.integers().map(str),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.text(max_size=8),
)
YAMLISH = st.lists(FRAGMENTS, max_size=60).map("".join)


@settings(deadline=1000, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), YAMLISH))
def test_any_text_loads_with_str_keys_or_is_refused(text: str) -> None:
    read_or_refuse(text)


PLAIN_NUMBER_LIKE = re.compile(r"[-+]?[0-9.][0-9_.eE+-]*|[-+]?\.[a-zA-Z]+")


def yaml11_safe(text: str) -> bool:
    """Strings PyYAML (YAML 1.1) dumps unquoted but the core schema reads as non-strings."""
    return text.lower() not in ("true", "false") and not PLAIN_NUMBER_LIKE.fullmatch(text) and text != "<<"


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
    st.text().filter(yaml11_safe),
)
DATA = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text().filter(yaml11_safe), children, max_size=4),
    max_leaves=20,
)


@settings(deadline=1000, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text().filter(yaml11_safe), DATA, max_size=5), st.booleans())
def test_dumped_documents_round_trip_or_refuse_shared_values(data: dict[str, Any], share: bool) -> None:
    if share and data:  # a repeated object makes the dumper emit an anchor and alias
        first = next(iter(data))
        data["shared_twice"] = [data[first], data[first]] if isinstance(data[first], list | dict) else 1
    unicode = bool(len(data) % 2)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=unicode)
    if re.search(r"(?m)(?:^|[:\-]\s)&id\d{3}(?:\s|$)", text):  # an anchor, not a key that merely reads "&id"
        assert "anchors and aliases" in refusal(text)
        return
    loaded = read_yaml_text(text, "dumped.yaml")
    assert loaded == yaml.safe_load(text)
    if not unicode:  # PyYAML's own emitter folds a raw U+0085 in single quotes into spaces
        assert loaded == data


def test_recursion_limit_is_irrelevant() -> None:
    limit, depth, frame = sys.getrecursionlimit(), 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    sys.setrecursionlimit(depth + 40)  # far below the 10,000 levels the depth test feeds it
    try:
        assert "nested deeper" in refusal(nested_lists(MAX_DEPTH + 5))
        assert read_yaml_text(REALISTIC, "p") == REALISTIC_EXPECTED
    finally:
        sys.setrecursionlimit(limit)
