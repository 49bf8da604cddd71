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
  (`OPERATOR(...)` binds as "any other operator", whatever it names), each operand spanning what
  PostgreSQL's precedence gives it: IN, LIKE, ILIKE, SIMILAR and BETWEEN (its AND) bind tighter
  than a comparison, IS looser (`a IS NULL = b` is `(a IS NULL) = b`), NOT's operand runs to AND
  or OR (`a = NOT b = c`); a chain PostgreSQL refuses (`a < b = c`) is sent as written, refused
  alike; an assignment (`SET c = ...`, `DO UPDATE SET c = excluded.c`) stays; `= ANY (...)` keeps
  its form;
- any other binary operator (`||`, `&`) becomes `OPERATOR(pg_catalog.||)`: the same precedence;
- `a IN (x, y, c)` is read as PostgreSQL's transformAExprIn reads it: the values naming no column,
  when more than one, `((a) OPERATOR(pg_catalog.=) ANY ((ARRAY[CASE WHEN false THEN a END, x,
  y])[2:]))`, the array typed with a as PostgreSQL types an IN list (an untyped `?` or text takes
  a's type; the CASE, sliced off, is a constant folded as the statement is planned), each other
  value `a = c`, OR-ed; rows `(a, b) IN ((1, 2), ...)` a row comparison each; `IN (SELECT ...)`
  `= ANY (SELECT ...)`; `NOT IN` `<> ALL`, `<>`, AND-ed; an operand binding a `?` (named twice)
  stays as written;
- `a IS [NOT] DISTINCT FROM b` becomes `[NOT] coalesce((a) OPERATOR(pg_catalog.=) (b), ROW(a) IS
  NULL AND ROW(b) IS NULL)` (`ROW(a) IS NULL`: a is the null value, a composite of NULL fields is
  not), rows field by field, where its operands bind no `?` (they are named twice);
- a call of one of pg_catalog's functions (`_FUNCTIONS`) by its bare name is named `pg_catalog.`.

The team's own SQL embedded in a statement (`select_sql`, a metric, a key's source expression) is
its own and stays as written: `PostgresEngine.team_sql` marks it with this process's secret, which
no text the team wrote can know, and the rewrite copies the marked text as it is. Unary operators
(`-1`) stay: pg_catalog has the exact one for every numeric type. The rewritten text is remembered
(runs of bound parameters, an IN list or a VALUES table, taken whole; a list of rows after IN not):
~0.3 ms a new statement text (the 217 texts of an end-to-end flow, 1,788 statements: ~65 ms),
~1.5 ms for one of 8,000 parameters, under a microsecond for a text seen before; the server runs
the same operators, so the statements' plans and their number do not change. A prefix operator
other than `-` and `+` (`@`, `~`, `|/`) stays, its operand as PostgreSQL reads it (`@ -5 + 1` is
`@ (-5 + 1)`); `E'...'` and `U&'...'` texts are read whole. `tests/test_attack_rewrite.py` runs
each rewrite against the text as written on a real server.
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
  | (?P<string>[Ee]'(?:[^'\\]|\\.|'')*'|[BbXxNn]?'(?:[^']|'')*'|[Uu]&'(?:[^']|'')*')
  | (?P<ident>(?:[Uu]&)?"(?:[^"]|"")*")
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
_IN_OPEN = re.compile(r"\bIN\s*\(\s*\Z", re.IGNORECASE)
_PARAMS = re.compile(r"\?(?:\s*,\s*\?)+|\(\?(?:\s*,\s*\?)*\)(?:\s*,\s*\(\?(?:\s*,\s*\?)*\))+")


# statements that define code or types rather than compute: their `name = value` option lists
# (`CREATE COLLATION c (provider = icu)`) are no comparisons, and the product sends none of them
_DEFINITION = re.compile(r"""\s*(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:COLLATION|OPERATOR|FUNCTION|AGGREGATE|TYPE|DOMAIN
    |CAST|TRIGGER|CONSTRAINT\s+TRIGGER|EVENT\s+TRIGGER|RULE|POLICY|PROCEDURE|EXTENSION|TEXT\s+SEARCH)
    |ALTER\s+(?:COLLATION|OPERATOR|FUNCTION|AGGREGATE|TYPE|DOMAIN|POLICY|PROCEDURE|EXTENSION|TEXT\s+SEARCH)
    |DO\b)""", re.IGNORECASE | re.VERBOSE)


def catalog_named(sql: str) -> str:
    """`sql` (the product's statement) with each operator and function named with pg_catalog, the
    team's marked SQL as written; a statement defining code or a type as it is (`_DEFINITION`)."""
    if _DEFINITION.match(sql):
        return sql
    kept: list[str] = []

    def hold(mark: str) -> Callable[[re.Match[str]], str]:
        def held(match: re.Match[str]) -> str:
            kept.append(match.group(match.lastindex or 0))
            return f"{mark}{len(kept) - 1}{mark}"
        return held

    if "/*team{" in sql:
        sql = _TEAM.sub(hold("\x00"), sql)
    if "?" in sql:
        held = hold("\x01")
        # a list of rows after IN is rewritten a row at a time (`_in_list`): not taken whole
        sql = _PARAMS.sub(lambda m: m.group(0) if m.group(0).startswith("(") and _IN_OPEN.search(sql, 0, m.start())
                          else held(m), sql)
    if not kept:
        return _rewrite(sql)
    return re.sub(r"[\x00\x01](\d+)[\x00\x01]", lambda m: kept[int(m.group(1))], _rewrite(sql))


class _Unchanged(Exception):
    """A statement PostgreSQL refuses as it parses it (a chain of comparisons, `a < b = c`): sent as
    written, it is refused alike, before any operator is looked up."""


Piece = tuple[int, str]  # text put beside a token by the operator at that index


class _Tok:
    __slots__ = ("after", "before", "binary", "kind", "orig", "role", "space", "text", "up")

    def __init__(self, kind: str, text: str, space: str) -> None:
        self.kind, self.text, self.orig, self.space = kind, text, text, space
        self.up = text.upper() if kind == "word" else text
        self.before: list[Piece] = []  # text put before it, outermost first
        self.after: list[Piece] = []   # text put after it, innermost first
        self.binary = False  # an operator between two operands (not a prefix, not `count(*)`'s star)
        self.role = ""  # "in": a word of IN, LIKE, ILIKE, SIMILAR, BETWEEN (its AND), ESCAPE; "is": of
        # a postfix IS [NOT] NULL/TRUE/FALSE/UNKNOWN, ISNULL, NOTNULL; "distinct": of IS [NOT] DISTINCT FROM


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
        if kind == "op" and ("--" in text[1:] or "/*" in text[1:]):
            # PostgreSQL's lexer: a comment starts where `--` or `/*` does, inside an operator too
            cut = min(n for n in (text.find("--", 1), text.find("/*", 1)) if n > 0)
            text, pos = text[:cut], pos - len(text) + cut
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
    _roles(toks, match)
    for i, tok in enumerate(toks):
        tok.binary = tok.kind == "op" and i > 0 and _ends_operand(toks, match, i - 1) and not (
            tok.text == "*" and (i + 1 == len(toks) or toks[i + 1].text in (",", ")", ";")
                                 or (toks[i + 1].kind == "word" and toks[i + 1].up in _STOP)))  # `ON (a) *`
    try:
        _rewrite_tokens(toks, match)
    except _Unchanged:
        return sql
    return _text(toks, 0, len(toks) - 1) + pending


def _ends_operand(toks: list[_Tok], match: dict[int, int], j: int) -> bool:
    tok = toks[j]
    if tok.kind in ("string", "ident", "dollar", "param", "params", "number", "team"):
        return True
    if tok.kind == "word":
        return tok.up not in _STOP or (tok.up == "END" and j in match) or tok.role == "is"
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


_LIKE = ("IN", "LIKE", "ILIKE", "SIMILAR", "BETWEEN")


def _roles(toks: list[_Tok], match: dict[int, int]) -> None:
    """The words of the constructs binding looser than any operator: IN, LIKE, ILIKE, SIMILAR and
    BETWEEN (tighter than a comparison), IS (looser)."""
    n = len(toks)
    for i, tok in enumerate(toks):
        if tok.kind != "word" or tok.role:
            continue
        nxt = toks[i + 1].up if i + 1 < n and toks[i + 1].kind == "word" else ""
        if tok.up in _LIKE or tok.up == "ESCAPE" or (tok.up == "NOT" and nxt in _LIKE):
            tok.role = "in"
            if tok.up == "BETWEEN":  # its AND: the first at its depth
                j, depth = i + 1, 0
                while j < n and depth >= 0:
                    if j in match and match[j] > j and toks[j].up != "OPERATOR":
                        j = match[j] + 1
                        continue
                    if toks[j].text in (")", "]", ",", ";") or (toks[j].up == "END" and j in match):
                        break
                    if toks[j].up == "AND":
                        toks[j].role = "in"
                        break
                    j += 1
        elif tok.up in ("ISNULL", "NOTNULL"):
            tok.role = "is"
        elif tok.up == "IS":
            words = [t.up for t in toks[i + 1:i + 4]]
            negated = words[:1] == ["NOT"]
            rest = words[1:] if negated else words
            if rest[:2] == ["DISTINCT", "FROM"]:
                for t in toks[i:i + (4 if negated else 3)]:
                    t.role = "distinct"
            elif rest[:1] and rest[0] in ("NULL", "TRUE", "FALSE", "UNKNOWN"):
                for t in toks[i:i + (3 if negated else 2)]:
                    t.role = "is"


# PostgreSQL's precedence of the binary operators the rewrite brackets (`OPERATOR(...)` binds as
# any other operator, level 4); IN, LIKE and BETWEEN bind at 3, a comparison at 2, IS at 1
_LEVEL = {"^": 7, "*": 6, "/": 6, "%": 6, "+": 5, "-": 5, **{c: 2 for c in _COMPARE}}
_ARITHMETIC = {"^", "*", "/", "%", "+", "-"}


def _called(toks: list[_Tok], j: int) -> bool:
    """Token j names a function it calls (`left(`), not a keyword (`LEFT JOIN`)."""
    return toks[j].up.lower() in _FUNCTIONS and j + 1 < len(toks) and toks[j + 1].text == "("


def _stops(toks: list[_Tok], j: int) -> bool:
    tok = toks[j]
    return tok.text in (",", ";") or (tok.kind == "word" and tok.up in _STOP and not _called(toks, j))


def _left(toks: list[_Tok], match: dict[int, int], i: int, level: int = 2) -> int:
    """The first token of the left operand of the operator at i, of precedence `level` (i when
    there is none): the operators it holds bind tighter, or as tight (left to right)."""
    j, start, postfix, compared = i - 1, i, False, False
    while j >= 0:
        tok = toks[j]
        if j in match and match[j] < j:  # a closer: its whole group
            j = start = match[j]
            j -= 1
            continue
        if j in match or tok.text in ("(", "["):
            break
        if tok.kind == "op" and tok.binary:
            found = _LEVEL.get(tok.orig, 4)
            if found == level == 2:
                raise _Unchanged  # `a < b = c`: PostgreSQL refuses it
            if found < level:
                break
            compared = compared or found == 2
        elif tok.kind == "op" and tok.orig not in ("+", "-") and level > 4:
            break  # a prefix operator (`@`, `~`, `|/`) binds as any other: `@ -5 + 1` is `@ (-5 + 1)`
        elif tok.role == "in":
            if level >= 3:
                break
        elif tok.role == "is":
            if level == 2 or (level == 1 and compared and not postfix):
                # `a = b IS NULL = c`: IS's left operand spans the comparison; `a IS NULL = b IS
                # DISTINCT FROM c`: the comparison holds it
                level, postfix = 1, True
            elif not postfix:
                break
            postfix = postfix and tok.up not in ("IS", "ISNULL", "NOTNULL")
        elif tok.role == "distinct" or _stops(toks, j):
            break
        start = j
        j -= 1
    return start


def _right(toks: list[_Tok], match: dict[int, int], i: int, level: int = 2) -> int:
    """The last token of the right operand of the operator at i, of precedence `level` (i when
    there is none): the operators it holds bind tighter."""
    j, end = i + 1, i
    while j < len(toks):
        tok = toks[j]
        if tok.up == "NOT" and not tok.role and ((toks[j - 1].kind == "op" and toks[j - 1].binary)
                                                 or toks[j - 1].role == "distinct"):
            level, end, j = 0, j, j + 1  # `a = NOT b = c` is `a = (NOT (b = c))`: NOT's operand, to AND or OR
            continue
        if j in match and match[j] > j:  # an opener: its whole group
            j = end = match[j]
            j += 1
            continue
        if j in match or tok.text in (")", "]"):
            break
        if tok.kind == "op" and tok.binary:
            found = _LEVEL.get(tok.orig, 4)
            if found == level == 2:
                raise _Unchanged
            if found <= level:
                break
        elif tok.kind == "op" and tok.orig not in ("+", "-"):
            level = min(level, 4)  # a prefix operator's operand: `2 * @ -5 + 1` is `2 * (@ (-5 + 1))`
        elif tok.role == "in":
            if level >= 3:
                break
        elif tok.role in ("is", "distinct"):
            if level > 0:
                break
        elif _stops(toks, j) and not (level == 0 and tok.up == "NOT"):
            break
        end = j
        j += 1
    return end


def _rewrite_tokens(toks: list[_Tok], match: dict[int, int]) -> None:
    assigning: dict[int, bool] = {}  # per bracket depth: inside a SET list
    distinct: list[int] = []
    deferred: list[tuple[Callable[..., None], tuple[int, ...]]] = []
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
            listed = _in_list(toks, match, i)
            if listed is not None:
                deferred.append((_in_values, listed))
        elif tok.up == "IS" and tok.role == "distinct":
            distinct.append(i)
        elif tok.kind == "word" and _called(toks, i) and not (i and (
                toks[i - 1].text == "." or toks[i - 1].up in ("AS", "INTO", "TABLE", "JOIN", "UPDATE", "INDEX",
                                                              "REFERENCES", "EXISTS"))):
            tok.text = f"pg_catalog.{tok.text.lower()}"
        i += 1
    deferred += [(_is_distinct, s) for s in (_distinct_span(toks, match, i) for i in distinct) if s is not None]
    # once the operators they hold are named, the innermost first: each is written anew, whole
    for rewrite, span in sorted(deferred, key=lambda d: d[1][-1] - d[1][0]):
        rewrite(toks, match, *span)


def _wrap(toks: list[_Tok], owner: int, first: int, last: int, opening: str, closing: str) -> None:
    toks[first].before.insert(0, (owner, opening))
    toks[last].after.append((owner, closing))


def _bracketed(toks: list[_Tok], match: dict[int, int], i: int) -> None:
    """`(a) OPERATOR(pg_catalog.op) (b)`, bracketed whole: it binds as any other operator."""
    level = _LEVEL[toks[i].orig]
    first = _left(toks, match, i, level)
    nxt = i + 1
    if toks[i].orig in _COMPARE and nxt + 1 < len(toks) and toks[nxt].up in ("ANY", "ALL", "SOME") \
            and toks[nxt + 1].text == "(":
        last = match.get(nxt + 1, nxt + 1)  # `= ANY (array)` keeps its form
        right = False
    else:
        last, right = _right(toks, match, i, level), True
    if first >= i or last <= i:
        raise ValueError(f"an operand of {toks[i].orig} is missing: {_text(toks, 0, len(toks) - 1)[:200]}")
    toks[i].text = f"OPERATOR(pg_catalog.{'<>' if toks[i].orig == '!=' else toks[i].orig})"
    _wrap(toks, i, first, last, "(", ")")
    _wrap(toks, i, first, i - 1, "(", ")")
    if right:
        _wrap(toks, i, nxt, last, "(", ")")


def _positional(toks: list[_Tok], first: int, last: int) -> bool:
    """Tokens first..last bind a positional parameter (`?`), which cannot be named twice."""
    return any(t.orig in ("?", "%s") or t.kind == "params" for t in toks[first:last + 1])


def _fields(toks: list[_Tok], match: dict[int, int], first: int, last: int) -> list[tuple[int, int]] | None:
    """The fields of a row constructor `(a, b)` or `ROW(a, ...)` spanning first..last, else None."""
    if toks[first].up == "ROW" and first + 1 <= last:
        first += 1
    elif toks[first].text != "(":
        return None
    if match.get(first) != last:
        return None
    fields, start, j = [], first + 1, first + 1
    while j < last:
        if j in match and match[j] > j:
            j = match[j] + 1
            continue
        if toks[j].text == ",":
            fields.append((start, j - 1))
            start = j + 1
        j += 1
    fields.append((start, last - 1))
    return fields if len(fields) > 1 or toks[first - 1].up == "ROW" else None


def _in_list(toks: list[_Tok], match: dict[int, int], i: int) -> tuple[int, int, int] | None:
    """`a IN (SELECT ...)` as `a = ANY (SELECT ...)`, a row `(a, b) IN ((1, 2), ...)` a comparison of
    rows a row (as PostgreSQL reads them; `NOT IN`: `<> ALL`, `NOT (...)`); a list of values is
    written at the end (`_in_values`): its span, else None."""
    negated = i > 0 and toks[i - 1].up == "NOT"
    operator = i - 1 if negated else i
    first = _left(toks, match, operator, 3)
    opening, closing = i + 1, match.get(i + 1)
    if closing is None or first >= operator or closing == opening + 1:
        return None
    if toks[opening + 1].up in ("SELECT", "WITH", "VALUES"):  # `= ANY (SELECT ...)`, `<> ALL`
        if negated:
            toks[i - 1].text = ""
        toks[i].text = "OPERATOR(pg_catalog.<>) ALL" if negated else "OPERATOR(pg_catalog.=) ANY"
        _wrap(toks, operator, first, closing, "(", ")")
        _wrap(toks, operator, first, operator - 1, "(", ")")
        return None
    if _positional(toks, first, operator - 1):
        return None  # left as it is: an operand binding a positional parameter cannot be named twice
    if _fields(toks, match, first, operator - 1) is not None:  # rows: one comparison a row
        left = _core(toks, first, operator - 1).strip()
        if negated:
            toks[i - 1].text = ""
        toks[i].text = "OPERATOR(pg_catalog.=)"
        toks[opening].text = toks[closing].text = ""
        for j in _commas(toks, match, opening, closing):
            toks[j].text = f" OR {left} OPERATOR(pg_catalog.=)"
        _wrap(toks, operator, first, closing, "(NOT (" if negated else "((", "))")
        return None
    return first, operator, closing


def _commas(toks: list[_Tok], match: dict[int, int], opening: int, closing: int) -> list[int]:
    """The commas between opening and closing at their depth."""
    found, j = [], opening + 1
    while j < closing:
        if j in match and match[j] > j:
            j = match[j] + 1
            continue
        if toks[j].text == ",":
            found.append(j)
        j += 1
    return found


# words of a value that names no column (`DATE '2026-01-01'`, `CAST(? AS numeric)`, `-1.5::float8`)
_CONSTANT_WORDS = {"NULL", "TRUE", "FALSE", "ARRAY", "CAST", "AS", "INTERVAL", "DATE", "TIME", "TIMESTAMP",
                   "WITH", "WITHOUT", "ZONE", "DOUBLE", "PRECISION", "CHARACTER", "VARYING"}


def _constant(toks: list[_Tok], first: int, last: int) -> bool:
    """Tokens first..last name no column (PostgreSQL's "holds no Var", as far as words tell)."""
    for j in range(first, last + 1):
        tok = toks[j]
        if tok.kind == "word" and tok.up not in _CONSTANT_WORDS and not (j and toks[j - 1].kind == "cast"):
            return False
        if tok.kind in ("ident", "team", "other"):
            return False
    return True


def _in_values(toks: list[_Tok], match: dict[int, int], first: int, operator: int, closing: int) -> None:
    """`a IN (x, y, c)` as PostgreSQL reads it (transformAExprIn): the values naming no column, when
    more than one, `a = ANY` an array of the type it finds for a and them together (`a`'s own where
    they are untyped: a text, NULL, a parameter), which a `CASE WHEN false THEN a END` first in the
    array gives it, sliced off again (`[2:]`; constants, folded as the statement is planned); each
    other value `a = c`, OR-ed (`NOT IN`: `<> ALL`, `a <> c`, AND-ed)."""
    negated = toks[operator].up == "NOT"
    opening = operator + (2 if negated else 1)
    left = _core(toks, first, operator - 1).strip()
    # an untyped operand (`NULL`, a text) takes the values' type, as in PostgreSQL's IN: no CASE for it
    typed = first != operator - 1 or toks[first].kind not in ("string", "param") and toks[first].up != "NULL"
    bounds = [opening, *_commas(toks, match, opening, closing), closing]
    items = [(a + 1, b - 1) for a, b in zip(bounds, bounds[1:], strict=False)]
    constants = [(a, b) for a, b in items if _constant(toks, a, b)]
    if len(constants) == 1 and toks[constants[0][0]].kind != "params":
        constants = []
    op = "<>" if negated else "="
    parts = []
    if constants:
        values = ", ".join(_core(toks, a, b).strip() for a, b in constants)
        parts.append(f"({left}) OPERATOR(pg_catalog.{op}) {'ALL' if negated else 'ANY'} "
                     + (f"((ARRAY[CASE WHEN false THEN {left} END, {values}])[2:])" if typed else f"(ARRAY[{values}])"))
    parts += [f"({left}) OPERATOR(pg_catalog.{op}) ({_core(toks, a, b).strip()})"
              for a, b in items if (a, b) not in constants]
    _replace(toks, first, closing, "(" + (" AND " if negated else " OR ").join(f"({p})" for p in parts) + ")")


def _replace(toks: list[_Tok], first: int, last: int, text: str) -> None:
    """Tokens first..last as `text`, what operators outside them put beside them kept."""
    space = toks[first].space
    for tok in toks[first:last + 1]:
        tok.text = tok.space = ""
        tok.before = [p for p in tok.before if not first <= p[0] <= last]
        tok.after = [p for p in tok.after if not first <= p[0] <= last]
    toks[first].space, toks[first].text = space, text


def _distinct_span(toks: list[_Tok], match: dict[int, int], i: int) -> tuple[int, int, int, int] | None:
    """The IS [NOT] DISTINCT FROM at i: its left operand's first token, i, its right operand's first
    and last; None where it stays as written."""
    after = i + (4 if toks[i + 1].up == "NOT" else 3)  # the right operand's first token
    first, last = _left(toks, match, i, 1), _right(toks, match, after - 1, 1)
    if first >= i or last < after or _positional(toks, first, last):
        return None  # left as it is: an operand binding a positional parameter cannot be named twice
    rows = _fields(toks, match, first, i - 1), _fields(toks, match, after, last)
    if (rows[0] is None) != (rows[1] is None) or (rows[0] and rows[1] and len(rows[0]) != len(rows[1])):
        return None  # a row beside a value: as written
    return first, i, after, last


def _is_distinct(toks: list[_Tok], match: dict[int, int], first: int, i: int, after: int, last: int) -> None:
    """`a IS DISTINCT FROM b` as `NOT coalesce(a = b, a and b the null value)`; rows field by field."""
    negated = toks[i + 1].up == "NOT"
    rows = _fields(toks, match, first, i - 1), _fields(toks, match, after, last)
    if rows[0] is not None and rows[1] is not None:
        pairs = [(_core(toks, *lf).strip(), _core(toks, *rf).strip()) for lf, rf in zip(rows[0], rows[1], strict=True)]
    else:
        pairs = [(_core(toks, first, i - 1).strip(), _core(toks, after, last).strip())]
    equal = [f"coalesce(({a}) OPERATOR(pg_catalog.=) ({b}), ROW({a}) IS NULL AND ROW({b}) IS NULL)" for a, b in pairs]
    _replace(toks, first, last, f"({' AND '.join(equal)})" if negated else f"(NOT ({' AND '.join(equal)}))")


def _core(toks: list[_Tok], first: int, last: int) -> str:
    """Tokens first..last as rewritten, without what operators outside them put beside them."""
    def inside(pieces: list[Piece]) -> str:
        return "".join(text for owner, text in pieces if first <= owner <= last)
    return "".join(t.space + inside(t.before) + t.text + inside(t.after) for t in toks[first:last + 1])


def _text(toks: list[_Tok], first: int, last: int) -> str:
    out: list[str] = []
    for t in toks[first:last + 1]:
        out.append(t.space)
        if t.before:
            out.extend(p for _, p in t.before)
        out.append(t.text)
        if t.after:
            out.extend(p for _, p in t.after)
    return "".join(out)
