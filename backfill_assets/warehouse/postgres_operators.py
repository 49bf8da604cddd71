"""The product's own statements on PostgreSQL, each operator and function named with `pg_catalog`.

PostgreSQL resolves a bare operator or function through the search path, and a namesake of the
database's own (`public.=(varchar, varchar)`) is the exact match where pg_catalog's needs a
coercion (`=(text, text)` for two VARCHARs), so it wins even with pg_catalog searched first. The
session checks for namesakes as it opens, before fingerprint reads and at commit, but one made by
another session and dropped again between two checks answered the statements in between: a plan's
row read for another plan, a partition predicate picking another partition's rows (found by an
attack). So every statement the product sends is rewritten here before it runs, its text only:

- a comparison `a = b` (`<>`, `!=`, `<`, `>`, `<=`, `>=`) or arithmetic `a + b` (`-`, `*`, `/`, `%`,
  `^`) becomes `((a) OPERATOR(pg_catalog.=) (b))`, its operands and itself bracketed
  (`OPERATOR(...)` binds as "any other operator", whatever it names); an assignment (`SET c = ...`,
  `DO UPDATE SET c = excluded.c`) stays; `= ANY (...)` keeps its form;
- any other binary operator (`||`, `&`) becomes `OPERATOR(pg_catalog.||)`: the same precedence;
- `a IN (x, y)` becomes `((a) OPERATOR(pg_catalog.=) ANY (ARRAY[x, y]))` (how PostgreSQL itself
  reads an IN list), `IN (SELECT ...)` `= ANY (SELECT ...)`, and `NOT IN` `<> ALL`;
- `a IS [NOT] DISTINCT FROM b` becomes `[NOT] coalesce((a) OPERATOR(pg_catalog.=) (b), (a) IS NULL
  AND (b) IS NULL)` where its operands bind no `?` (they are named twice);
- a call of one of pg_catalog's functions (`_FUNCTIONS`) by its bare name is named `pg_catalog.`.

The team's own SQL embedded in a statement (`select_sql`, a metric, a key's source expression) is
its own and stays as written: `PostgresEngine.team_sql` marks it with this process's secret, which
no text the team wrote can know, and the rewrite copies the marked text as it is. Unary operators
(`-1`) stay: pg_catalog has the exact one for every numeric type. The rewritten text is remembered
(runs of bound parameters, an IN list or a VALUES table, taken whole): ~0.05 ms a new statement
text, ~0.6 ms for one of 8,000 parameters, under a microsecond for a text seen before; the server
runs the same operators, so the statements' plans and their number do not change.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Callable

SECRET = secrets.token_hex(8)
_TEAM = re.compile(r"/\*team\{" + SECRET + r"\*/(.*?)/\*\}team" + SECRET + r"\*/", re.DOTALL)


def team(sql: str) -> str:
    """The team's SQL, marked to be left as written (`PostgresEngine.team_sql`)."""
    return f"/*team{{{SECRET}*/{sql}/*}}team{SECRET}*/"


_TOKEN = re.compile(r"""
    (?P<space>\s+|--[^\n]*|/\*.*?\*/)
  | (?P<team>\x00\d+\x00)
  | (?P<params>\x01\d+\x01)
  | (?P<string>[EeBbXxNn]?'(?:[^']|'')*')
  | (?P<ident>"(?:[^"]|"")*")
  | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*|)\$.*?\$(?P=tag)\$)
  | (?P<param>\?|\$[A-Za-z_][A-Za-z0-9_]*|%s|%\([A-Za-z_][A-Za-z0-9_]*\)s)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<cast>::)
  | (?P<op>[-+*/<>=~!@#%^&|`]+)
  | (?P<punct>[(),;\[\].:])
""", re.VERBOSE | re.DOTALL)

_COMPARE = {"=", "<>", "!=", "<", ">", "<=", ">="}
# what ends an operand of a comparison (keywords of lower precedence or of a clause)
_STOP = set("""SELECT FROM WHERE AND OR NOT ON WHEN THEN ELSE HAVING SET RETURNING BY AS LIMIT OFFSET VALUES
USING DO IS ISNULL NOTNULL DISTINCT UNION EXCEPT INTERSECT JOIN LEFT RIGHT INNER OUTER CROSS FULL NATURAL GROUP
ORDER FOR INTO UPDATE DELETE INSERT WITH CONFLICT NOTHING ASC DESC NULLS WINDOW PARTITION ROWS RANGE LATERAL
BETWEEN IN LIKE ILIKE SIMILAR ESCAPE CHECK DEFAULT SOME ANY ALL RECURSIVE TABLE FETCH SKIP NOWAIT OF WITHIN
CREATE LOCK""".split())
# pg_catalog's functions the product calls by their bare names (syntax such as COALESCE, CAST,
# GREATEST or EXTRACT is no function looked up by name)
_FUNCTIONS = set("""count sum min max avg length lower upper string_agg array_agg row_number rank dense_rank lag
lead first_value last_value nextval currval setval abs round floor ceil ceiling trunc left right substr md5
sha256 encode decode convert_to convert_from to_json to_jsonb json_build_object json_build_array jsonb_build_object
json_agg jsonb_agg concat concat_ws replace split_part strpos starts_with unnest generate_series bool_and bool_or
every date_trunc to_char now clock_timestamp octet_length char_length character_length format array_length
cardinality string_to_array array_to_string regexp_replace hashtext hashtextextended float8send ltrim rtrim btrim
to_date to_timestamp age date_part sign mod power sqrt ln exp log stddev variance stddev_samp stddev_pop var_samp
var_pop""".split())


# a run of bound parameters (`?, ?, ?`, `(?, ?), (?, ?)`: an IN list, a VALUES table of thousands
# of rows) holds nothing to name: taken whole, it costs the rewrite one token, not thousands
_PARAMS = re.compile(r"\?(?:\s*,\s*\?)+|\(\?(?:\s*,\s*\?)*\)(?:\s*,\s*\(\?(?:\s*,\s*\?)*\))+")


def catalog_named(sql: str) -> str:
    """`sql` (the product's statement) with each operator and function named with pg_catalog, the
    team's marked SQL as written."""
    kept: list[str] = []

    def hold(mark: str) -> Callable[[re.Match[str]], str]:
        def held(match: re.Match[str]) -> str:
            kept.append(match.group(match.lastindex or 0))
            return f"{mark}{len(kept) - 1}{mark}"
        return held

    if "/*team{" in sql:
        sql = _TEAM.sub(hold("\x00"), sql)
    if "?" in sql:
        sql = _PARAMS.sub(hold("\x01"), sql)
    if not kept:
        return _rewrite(sql)
    return re.sub(r"[\x00\x01](\d+)[\x00\x01]", lambda m: kept[int(m.group(1))], _rewrite(sql))


class _Tok:
    __slots__ = ("after", "before", "binary", "kind", "orig", "space", "text", "up")

    def __init__(self, kind: str, text: str, space: str) -> None:
        self.kind, self.text, self.orig, self.space = kind, text, text, space
        self.up = text.upper() if kind == "word" else text
        self.before = ""  # text put before it
        self.after = ""   # text put after it
        self.binary = False  # an operator between two operands (not a prefix, not `count(*)`'s star)


@functools.lru_cache(maxsize=1024)
def _rewrite(sql: str) -> str:
    toks: list[_Tok] = []
    pending = ""  # spaces and comments before the next token
    pos = 0
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        if m is None:  # a character no rule names: taken as it is
            toks.append(_Tok("other", sql[pos], pending))
            pending = ""
            pos += 1
            continue
        kind, text, pos = m.lastgroup or "other", m.group(0), m.end()
        if kind == "space":
            pending += text
            continue
        if kind == "op" and len(text) > 1 and text[-1] in "+-" and not set(text) & set("~!@#%^&|`"):
            # PostgreSQL's lexer: a trailing + or - is an operator of its own (`=-1`), and `+-` is
            # `+` then `-` (an operator keeps its first character)
            stem = text.rstrip("+-") or text[0]
            toks.append(_Tok("op", stem, pending))
            toks.extend(_Tok("op", ch, "") for ch in text[len(stem):])
        else:
            toks.append(_Tok(kind, text, pending))
        pending = ""
    match = _brackets(toks)
    for i, tok in enumerate(toks):
        tok.binary = tok.kind == "op" and i > 0 and _ends_operand(toks, match, i - 1)
    _rewrite_tokens(toks, match)
    return _text(toks, 0, len(toks) - 1) + pending


def _ends_operand(toks: list[_Tok], match: dict[int, int], j: int) -> bool:
    tok = toks[j]
    if tok.kind in ("string", "ident", "dollar", "param", "params", "number", "team"):
        return True
    if tok.kind == "word":
        return tok.up not in _STOP or (tok.up == "END" and j in match)
    return tok.text in (")", "]")


def _brackets(toks: list[_Tok]) -> dict[int, int]:
    """Each opener's index -> its closer's and back: ( ), [ ], CASE END, and OPERATOR(...) as one."""
    match: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.up == "OPERATOR" and i + 1 < len(toks) and toks[i + 1].text == "(":
            j = i + 2
            while j < len(toks) - 1 and toks[j].text != ")":
                j += 1
            match[i], match[j] = j, i
            i = j + 1
            continue
        if tok.text in ("(", "[") or tok.up == "CASE":
            stack.append(i)
        elif (tok.text in (")", "]") or tok.up == "END") and stack:
            j = stack.pop()
            match[i], match[j] = j, i
        i += 1
    return match


# PostgreSQL's precedence of the binary operators the rewrite brackets (`OPERATOR(...)` binds as
# any other operator, level 4); IN, LIKE and BETWEEN bind at 3
_LEVEL = {"^": 7, "*": 6, "/": 6, "%": 6, "+": 5, "-": 5, **{c: 2 for c in _COMPARE}}
_ARITHMETIC = {"^", "*", "/", "%", "+", "-"}


def _level(tok: _Tok) -> int:
    if tok.kind == "op" and tok.binary:
        return _LEVEL.get(tok.orig, 4)
    return 3 if tok.up in ("IN", "LIKE", "ILIKE", "SIMILAR", "BETWEEN") else 99


def _called(toks: list[_Tok], j: int) -> bool:
    """Token j names a function it calls (`left(`), not a keyword (`LEFT JOIN`)."""
    return toks[j].up.lower() in _FUNCTIONS and j + 1 < len(toks) and toks[j + 1].text == "("


def _stops(toks: list[_Tok], j: int) -> bool:
    tok = toks[j]
    return tok.text in (",", ";") or (tok.kind == "word" and tok.up in _STOP and not _called(toks, j))


def _left(toks: list[_Tok], match: dict[int, int], i: int, level: int = 2) -> int:
    """The first token of the left operand of the operator at i, of precedence `level` (i when
    there is none): the operators it holds bind tighter, or as tight (left to right)."""
    j, start = i - 1, i
    while j >= 0:
        if j in match and match[j] < j:  # a closer: its whole group
            j = start = match[j]
            j -= 1
            continue
        if j in match or toks[j].text in ("(", "[") or _stops(toks, j) or _level(toks[j]) < level or (
                level == 2 and _level(toks[j]) == 2):
            break
        start = j
        j -= 1
    return start


def _right(toks: list[_Tok], match: dict[int, int], i: int, level: int = 2) -> int:
    """The last token of the right operand of the operator at i, of precedence `level` (i when
    there is none): the operators it holds bind tighter."""
    j, end = i + 1, i
    while j < len(toks):
        if j in match and match[j] > j:  # an opener: its whole group
            j = end = match[j]
            j += 1
            continue
        if j in match or toks[j].text in (")", "]") or _stops(toks, j) or _level(toks[j]) <= level:
            break
        end = j
        j += 1
    return end


def _rewrite_tokens(toks: list[_Tok], match: dict[int, int]) -> None:
    assigning: dict[int, bool] = {}  # per bracket depth: inside a SET list
    distinct: list[int] = []
    depth = 0
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.up == "OPERATOR" and i in match:  # already named with its schema
            i = match[i] + 1
            continue
        if tok.text in ("(", "[") or (tok.up == "CASE" and i in match):
            depth += 1
            assigning[depth] = False
        elif tok.text in (")", "]") or (tok.up == "END" and i in match):
            assigning.pop(depth, None)
            depth -= 1
        elif tok.up == "SET":
            assigning[depth] = True
        elif tok.up in ("WHERE", "FROM", "RETURNING", "ON", "SELECT") or tok.text == ";":
            assigning[depth] = False
        elif tok.kind == "op" and tok.binary and tok.orig in _COMPARE:
            if not assigning.get(depth, False):
                _bracketed(toks, match, i)
        elif tok.kind == "op" and tok.binary and tok.orig in _ARITHMETIC:
            _bracketed(toks, match, i)
        elif tok.kind == "op" and tok.binary and tok.orig not in ("=>",):
            # as tight as any other operator: no brackets; apart from its operands (`t||'x'`)
            apart = "" if tok.space else " ", "" if i + 1 < len(toks) and toks[i + 1].space else " "
            tok.text = f"{apart[0]}OPERATOR(pg_catalog.{tok.orig}){apart[1]}"
        elif tok.up == "IN" and i + 1 < len(toks) and toks[i + 1].text == "(":
            _in_list(toks, match, i)
        elif tok.up == "IS" and _distinct_from(toks, i):
            distinct.append(i)
        elif tok.kind == "word" and _called(toks, i) and not (i and (
                toks[i - 1].text == "." or toks[i - 1].up in ("AS", "INTO", "TABLE", "JOIN", "UPDATE", "INDEX",
                                                              "REFERENCES", "EXISTS"))):
            tok.text = f"pg_catalog.{tok.text.lower()}"
        i += 1
    for i in distinct:  # once their operands are rewritten
        _is_distinct(toks, match, i)


def _bracketed(toks: list[_Tok], match: dict[int, int], i: int) -> None:
    """`(a) OPERATOR(pg_catalog.op) (b)`, bracketed whole: it binds as any other operator."""
    level = _LEVEL[toks[i].orig]
    first = _left(toks, match, i, level)
    nxt = i + 1
    if toks[i].orig in _COMPARE and nxt + 1 < len(toks) and toks[nxt].up in ("ANY", "ALL", "SOME") \
            and toks[nxt + 1].text == "(":
        last = nxt + 1  # `= ANY (array)` keeps its form
        right = False
    else:
        last, right = _right(toks, match, i, level), True
    if first >= i or last <= i:
        raise ValueError(f"an operand of {toks[i].orig} is missing: {_text(toks, 0, len(toks) - 1)[:200]}")
    toks[i].text = f"OPERATOR(pg_catalog.{'<>' if toks[i].orig == '!=' else toks[i].orig})"
    toks[first].before = "((" + toks[first].before
    toks[i - 1].after += ")"
    if right:
        toks[nxt].before = "(" + toks[nxt].before
        toks[last].after += "))"
    else:
        toks[match[nxt + 1]].after += ")"


def _in_list(toks: list[_Tok], match: dict[int, int], i: int) -> None:
    negated = i > 0 and toks[i - 1].up == "NOT"
    operator = i - 1 if negated else i
    first = _left(toks, match, operator, 3)
    opening, closing = i + 1, match.get(i + 1)
    if closing is None or first >= operator:
        return
    toks[first].before = "((" + toks[first].before
    toks[operator - 1].after += ")"
    if negated:
        toks[i - 1].text = ""
    toks[i].text = "OPERATOR(pg_catalog.<>) ALL" if negated else "OPERATOR(pg_catalog.=) ANY"
    toks[closing].after += ")"
    inner = toks[opening + 1:closing]
    if inner and all(t.orig.startswith("'") if n % 2 == 0 else t.orig == "," for n, t in enumerate(inner)) \
            and len(inner) % 2:
        # untyped texts take the other side's type, as in the IN list they were (`order_date IN
        # ('2026-01-31', ...)`): one untyped array literal of them does too
        items = ",".join('"' + t.orig[1:-1].replace("''", "'").replace("\\", "\\\\").replace('"', '\\"') + '"'
                         for t in inner[::2])
        for t in inner:
            t.text = t.before = t.after = t.space = ""
        inner[0].text = "'{" + items.replace("'", "''") + "}'"
    elif inner and inner[0].up not in ("SELECT", "WITH", "VALUES"):
        toks[opening].text = "(ARRAY["  # how PostgreSQL itself reads an IN list
        toks[closing].text = "])"


def _distinct_from(toks: list[_Tok], i: int) -> bool:
    words = [t.up for t in toks[i + 1:i + 4]]
    return words[:2] == ["DISTINCT", "FROM"] or words[:3] == ["NOT", "DISTINCT", "FROM"]


def _is_distinct(toks: list[_Tok], match: dict[int, int], i: int) -> None:
    negated = toks[i + 1].up == "NOT"
    after = i + (4 if negated else 3)  # the right operand's first token
    first, last = _left(toks, match, i), _right(toks, match, after - 1)
    if first >= i or last < after or any(t.orig in ("?", "%s") or t.kind == "params"
                                                   for t in toks[first:last + 1]):
        return  # left as it is: an operand binding a positional parameter cannot be named twice
    left, right = _text(toks, first, i - 1).strip(), _text(toks, after, last).strip()
    equal = f"coalesce(({left}) OPERATOR(pg_catalog.=) ({right}), ({left}) IS NULL AND ({right}) IS NULL)"
    space = toks[first].space
    for tok in toks[first:last + 1]:
        tok.text = tok.before = tok.after = tok.space = ""
    toks[first].space = space
    toks[first].text = f"({equal})" if negated else f"(NOT {equal})"


def _text(toks: list[_Tok], first: int, last: int) -> str:
    return "".join(t.space + t.before + t.text + t.after for t in toks[first:last + 1])
