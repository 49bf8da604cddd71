"""A bounded, strict YAML reader for the files a team writes: plans and the trust policy.

``yaml.safe_load`` trusts its input too much for a file that gates production writes: alias bombs
expand into millions of nodes, duplicate keys silently override each other, ``2026-02-30`` escapes
as a raw ValueError and ``yes`` becomes a boolean. This reader walks PyYAML's event stream
iteratively (no recursion, so no RecursionError however deep the input) and refuses anything a
plan never needs, so every failure is one short ``PlanReadError`` line.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, MappingStartEvent, ScalarEvent, StreamEndEvent

from backfill_assets.bounded import NotRegularFile, read_regular
from backfill_assets.errors import PlanReadError

MAX_PLAN_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NODES = 20_000
# Decimal->int conversion is quadratic in CPython; also the default int_max_str_digits ceiling.
_MAX_INT_DIGITS = 4300
_QUOTE_CHARS = 60

# YAML 1.2 core schema, ASCII digits only: int() and float() also accept "1_000" and Unicode digits.
_NULL = re.compile(r"(?:~|null|Null|NULL|)\Z")
_INT = re.compile(r"[-+]?[0-9]+\Z")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
_INF = re.compile(r"[-+]?\.(?:inf|Inf|INF)\Z")
_NAN = re.compile(r"\.(?:nan|NaN|NAN)\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")
# PyYAML scans a directive at column 0 of ANY line (even mid-document) and int()s its version
# number unbounded, which raises ValueError past 4300 digits, so directives are refused up front.
_DIRECTIVE = re.compile(r"(?:\A\ufeff?|[\n\r\x85\u2028\u2029])%")


def _escape(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _short(text: str) -> str:
    """Quote input in a message: capped, and escaped so it stays on one line."""
    return _escape(text[:_QUOTE_CHARS] + ("..." if len(text) > _QUOTE_CHARS else ""))


def _refuse(source: str, problem: str, fix: str) -> PlanReadError:
    # a file name may hold a newline too, and the message must stay one line
    return PlanReadError(f"{_escape(source)}: {problem}", fix=fix)


def _line(event: Any) -> int:
    return int(event.start_mark.line) + 1


class _Frame:
    """One open mapping or list. The dotted path is only built for a message: copying it into every
    child would be quadratic for a long key above many small collections."""

    __slots__ = ("value", "parent", "step", "key", "lines")

    def __init__(self, value: dict[str, Any] | list[Any], parent: _Frame | None) -> None:
        self.value = value
        self.parent = parent
        self.step = None if parent is None else parent.next_step()
        self.key: str | None = None  # a mapping's key awaiting its value
        self.lines: dict[str, int] = {}  # a mapping's keys and the line each was first seen on

    def expects_key(self) -> bool:
        return isinstance(self.value, dict) and self.key is None

    def next_step(self) -> str:
        return str(len(self.value)) if isinstance(self.value, list) else str(self.key)

    def add(self, item: Any) -> None:
        if isinstance(self.value, list):
            self.value.append(item)
        elif self.key is None:
            self.key = item
        else:
            self.value[self.key] = item
            self.key = None

    def path(self, last: str) -> str:
        frame: _Frame | None
        steps, frame = [last], self
        while frame is not None and frame.step is not None:
            steps.append(frame.step)
            frame = frame.parent
        return ".".join(reversed(steps))


class _PlanLoader(yaml.SafeLoader):
    """SafeLoader's reader/scanner/parser, with our own non-recursive composer and resolver."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.plan_source = source

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # Before the first event of `[[[[...`, PyYAML's scanner looks up to 1024 tokens ahead for a
        # possible simple key and rechecks every open level per token (~0.3 s), so stop it here.
        # Should PyYAML rename this hook, the event-level depth check below still refuses.
        if self.flow_level >= MAX_DEPTH:
            raise _refuse(self.plan_source, f"nested deeper than {MAX_DEPTH} levels (line "
                          f"{self.line + 1})", "flatten the structure")
        super().fetch_flow_collection_start(token_class)

    def _plan_event(self, peek: bool = False) -> Any:
        try:
            return self.peek_event() if peek else self.get_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = _short(exc.problem or exc.context or "invalid YAML")
            raise _refuse(self.plan_source, f"malformed YAML{where} ({problem})",
                          "fix the indentation or quoting there") from None
        except (yaml.YAMLError, ValueError, IndexError, RecursionError, MemoryError) as exc:
            # last resort: a PyYAML defect on odd input must still be one line, not a traceback
            raise _refuse(self.plan_source, f"cannot parse YAML near line {self.line + 1} "
                          f"({type(exc).__name__})", "simplify the YAML there") from None

    def _plan_scalar(self, event: ScalarEvent) -> Any:
        value = event.value
        if event.style is not None:  # quoted and block scalars are always text
            if _SURROGATE.search(value):  # only a "\ud800" escape gets here; it cannot be encoded
                raise _refuse(self.plan_source, f"lone surrogate escape at line {_line(event)}",
                              "remove the \\uD800-\\uDFFF escape")
            return value
        if _NULL.match(value):
            return None
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        if _INT.match(value):
            if len(value.lstrip("+-")) > _MAX_INT_DIGITS:
                raise _refuse(self.plan_source, f"integer at line {_line(event)} has more than "
                              f"{_MAX_INT_DIGITS} digits", "use a realistic number")
            return int(value)
        if _FLOAT.match(value):
            return float(value)
        if _INF.match(value):  # float() knows "inf" but not YAML's ".inf"
            return float(value.replace(".", ""))
        if _NAN.match(value):
            return float("nan")
        return value

    def plan_document(self) -> dict[str, Any]:
        source = self.plan_source
        self._plan_event()  # StreamStart
        if isinstance(self._plan_event(peek=True), StreamEndEvent):
            raise _refuse(source, "the plan is empty", "start from templates/backfill-plan.yaml")
        self._plan_event()  # DocumentStart
        stack: list[_Frame] = []
        nodes = 0
        while True:
            event = self._plan_event()
            if isinstance(event, AliasEvent) or getattr(event, "anchor", None) is not None:
                raise _refuse(source, f"anchors and aliases are not allowed in a plan (line "
                              f"{_line(event)})", "write each value out in full")
            if isinstance(event, ScalarEvent | CollectionStartEvent):
                nodes += 1
                if nodes > MAX_NODES:
                    raise _refuse(source, f"more than {MAX_NODES} values (line {_line(event)})",
                                  "a plan is a short file; remove the bulk data")
                if event.tag is not None:
                    tag = event.tag.replace("tag:yaml.org,2002:", "!!", 1)
                    raise _refuse(source, f"explicit tag `{_short(tag)}` at line {_line(event)}"
                                  " is not allowed", "remove the tag; plans use plain values")
            parent = stack[-1] if stack else None
            expects_key = parent is not None and parent.expects_key()
            if isinstance(event, CollectionStartEvent):
                if expects_key:
                    raise _refuse(source, f"a list or mapping is used as a key at line "
                                  f"{_line(event)}", "keys must be plain names")
                if len(stack) >= MAX_DEPTH:
                    raise _refuse(source, f"nested deeper than {MAX_DEPTH} levels (line "
                                  f"{_line(event)})", "flatten the structure")
                stack.append(_Frame({} if isinstance(event, MappingStartEvent) else [], parent))
                continue
            if isinstance(event, ScalarEvent):
                value = self._plan_scalar(event)
            else:  # MappingEnd / SequenceEnd
                value = stack.pop().value
                parent = stack[-1] if stack else None
                expects_key = False
            if parent is None:
                root = value
                break
            if expects_key:
                self._plan_key(event, value, parent)
            parent.add(value)
        if not isinstance(self._plan_event(), yaml.DocumentEndEvent) or not isinstance(
            self._plan_event(peek=True), StreamEndEvent
        ):
            raise _refuse(source, "more than one YAML document (a second `---`)",
                          "keep one plan per file")
        if root is None and isinstance(event, ScalarEvent) and event.value == "":
            raise _refuse(source, "the plan is empty", "start from templates/backfill-plan.yaml")
        if not isinstance(root, dict):
            kind = "null" if root is None else type(root).__name__
            raise _refuse(source, f"expected a mapping of plan keys at the top level, found {kind}",
                          "start from templates/backfill-plan.yaml")
        return root

    def _plan_key(self, event: ScalarEvent, key: Any, frame: _Frame) -> None:
        line = _line(event)
        if not isinstance(key, str):
            raise _refuse(self.plan_source, f"key {_short(event.value or 'null')} at line {line} is "
                          f"{'null' if key is None else type(key).__name__}, not a name",
                          "quote it if it is meant as text, or fix the indentation")
        if key == "<<":
            raise _refuse(self.plan_source, f"merge key `<<` at line {line} is not allowed",
                          "write the keys out in full")
        if key in frame.lines:
            raise _refuse(self.plan_source, f"duplicate key `{_short(frame.path(key))}` at line {line} "
                          f"(first at line {frame.lines[key]})", "keep one of them and delete the other")
        frame.lines[key] = line


# Text parsed before, by its sha256: a command reads one plan several times (loading it, approving
# it, mirroring signatures into it) and the pure-Python scanner takes ~7 ms a plan (a copy, 0.05).
# Each caller gets its own copy to change; refusals are never cached (they are raised again).
_PARSED: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
_PARSED_KEPT = 32


def read_yaml_text(text: str, source: str) -> dict[str, Any]:
    """Parse plan text into a mapping with str keys; any refusal is a one-line PlanReadError."""
    if len(text) > MAX_PLAN_BYTES:  # before hashing it: an unbounded text is refused unread
        return _parse(text, source)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    cached = _PARSED.get(digest)
    if cached is not None:
        return copy.deepcopy(cached)
    document = _parse(text, source)
    _PARSED[digest] = copy.deepcopy(document)
    while len(_PARSED) > _PARSED_KEPT:
        _PARSED.popitem(last=False)
    return document


def _parse(text: str, source: str) -> dict[str, Any]:
    if len(text) > MAX_PLAN_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_PLAN_BYTES:
        raise _refuse(source, f"larger than {MAX_PLAN_BYTES // 1024} KB", "a plan is a short file")
    directive = _DIRECTIVE.search(text)
    if directive:
        line = len(re.findall(r"\r\n|[\n\r\x85\u2028\u2029]", text[: directive.end()])) + 1
        raise _refuse(source, f"YAML directive (%YAML, %TAG) at line {line} is not allowed",
                      "remove the line starting with %")
    try:
        loader = _PlanLoader(text, source)
    except yaml.reader.ReaderError as exc:  # raised up front by the printable-characters check
        line = text.count("\n", 0, exc.position) + 1
        raise _refuse(source, f"character {exc.character:#06x} at line {line} is not allowed in YAML",
                      "remove the control character") from None
    return loader.plan_document()


def read_yaml_file(path: Path) -> dict[str, Any]:
    """Read and parse a plan file; size is checked on the bytes, before decoding or parsing."""
    source = str(path)
    try:
        # one byte past the limit, so a huge file is never slurped whole; a FIFO or device is
        # refused before a byte is read (opening a FIFO would wait for a writer forever)
        data = read_regular(path, MAX_PLAN_BYTES)
    except NotRegularFile as exc:
        raise _refuse(source, f"is {exc.kind}, not a regular file", "give the path of a plan .yaml file") from None
    except FileNotFoundError:
        raise _refuse(source, "no such plan file",
                      "check the path, or create one with `backfill plan new`") from None
    except IsADirectoryError:
        raise _refuse(source, "is a directory", "give the path of a plan .yaml file") from None
    except PermissionError:
        raise _refuse(source, "permission denied", "check the file's permissions") from None
    except OSError as exc:
        raise _refuse(source, f"cannot read ({_short(exc.strerror or type(exc).__name__)})",
                      "check the path") from None
    if len(data) > MAX_PLAN_BYTES:
        raise _refuse(source, f"larger than {MAX_PLAN_BYTES // 1024} KB", "a plan is a short file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _refuse(source, f"not UTF-8 (byte {exc.start} on line {line})",
                      "save the file as UTF-8") from None
    return read_yaml_text(text, source)
