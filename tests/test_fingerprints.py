"""Fingerprints are a function we define, pinned here: an engine upgrade that changes a value's text
fails loudly instead of silently voiding every stored fingerprint (snapshots, proofs, publish
checks). The legacy md5 sum is pinned too: a record made before the upgrade must still verify."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import struct

import pytest

from backfill_assets.partitions import PartitionScheme
from backfill_assets.warehouse.fingerprints import (
    EMPTY,
    LEGACY_EMPTY,
    Fingerprint,
    column_types,
    digest_sql,
    fingerprints,
    fingerprints_like,
)

COLUMNS = ["day", "name", "amount", "n", "seen", "ratio", "happened"]
TYPES = ["DATE", "VARCHAR", "DECIMAL(18,2)", "BIGINT", "TIMESTAMP", "DOUBLE PRECISION", "TIMESTAMPTZ"]
ROWS = [
    ("2026-01-01", "alice", "12.50", 3, "2026-01-01 10:00:00", "100", "2026-01-01 10:00:00.25+02:00"),
    ("2026-01-01", None, "0.00", None, None, None, None),
    ("2026-01-01", "b\u00e9", "-7.25", 9007199254740993, "2026-01-01 23:59:59.123456", "0.1",
     "2026-06-30 23:00:00-04:00"),
    ("2026-01-02", "x:1", "1.00", 0, "2026-01-02 00:00:00", "NaN", "2026-01-02 00:00:00+00:00"),
    ("2026-01-02", "x:1", "1.00", 0, "2026-01-02 00:00:00", "NaN", "2026-01-02 00:00:00+00:00"),  # a duplicate
    # the floats whose text differs between the engines (1e15 is `1000000000000000.0` on DuckDB and
    # `1e+15` on PostgreSQL, `-0` is `-0.0` and `-0`, `-inf` is `-inf` and `-Infinity`)
    ("2026-01-04", "f", "0.01", 1, "2026-01-04 00:00:00", "1e15", "2026-01-04 00:00:00+00:00"),
    ("2026-01-04", "f", "0.01", 2, "2026-01-04 00:00:00", "-0", "2026-01-04 00:00:00+00:00"),
    ("2026-01-04", "f", "0.01", 3, "2026-01-04 00:00:00", "-inf", "2026-01-04 00:00:00+00:00"),
    ("2026-01-04", "f", "0.01", 4, "2026-01-04 00:00:00", "2.5e-5", "2026-01-04 00:00:00+00:00"),
]
KEYS = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]
# Pinned on DuckDB 2.0.1 and PostgreSQL 15: the same values on both engines.
GOLDEN = {
    "2026-01-01": Fingerprint(3, "sha256:aa74518275ba97c3427acbec7d16c5af8d5e393521f9b30b405f04aa611041dd"),
    "2026-01-02": Fingerprint(2, "sha256:cd10fd3a8b33398b14b223b74cbbd8b88d8bfcfd0b447b81c0867df27432dd4c"),
    "2026-01-03": EMPTY,
    "2026-01-04": Fingerprint(4, "sha256:117f728ad5e871c4e13ee62faa2cec2dce9a08e6a77883011bddaf620e553e2b"),
}
# The previous release's md5 sum over the first five columns, as pinned before sha256 fingerprints:
# the legacy path (used only to verify a record it made) must give exactly these.
LEGACY_COLUMNS = COLUMNS[:5]
LEGACY_GOLDEN = {
    "2026-01-01": Fingerprint(3, "31044632207147824978"),
    "2026-01-02": Fingerprint(2, "21075681843510153552"),
    "2026-01-03": LEGACY_EMPTY,
}
SCHEME = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), tuple(KEYS), "golden")


def make_table(session, name: str = "golden", rows=ROWS) -> None:
    session.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in zip(COLUMNS, TYPES, strict=True))})")
    casts = ", ".join(f"CAST(? AS {t})" if t != "BIGINT" else "?" for t in TYPES)
    for row in rows:
        session.execute(f"INSERT INTO {name} VALUES ({casts})", list(row))


# --- the definition, in Python ---------------------------------------------------------------

def _timestamp_text(value: dt.datetime) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return text + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "")


def value_text(kind: str, value: object) -> str:
    """A value's text: the engines' own cast, except floats (IEEE-754 bits) and TIMESTAMPTZ (UTC)."""
    if kind == "DOUBLE PRECISION":
        number = float(str(value))
        return "NaN" if math.isnan(number) else struct.pack(">d", number).hex()
    if kind == "TIMESTAMPTZ":
        return _timestamp_text(dt.datetime.fromisoformat(str(value)).astimezone(dt.UTC).replace(tzinfo=None))
    return str(value)


def row_text(row, types=TYPES) -> str:
    return "".join("~" if v is None else f"{len(value_text(t, v))}:{value_text(t, v)}"
                   for v, t in zip(row, types, strict=True))


def by_definition(rows) -> Fingerprint:
    """sha256 over the rows' sha256 digests in ascending byte order, duplicates kept."""
    digests = sorted(hashlib.sha256(row_text(r).encode("utf-8")).digest() for r in rows)
    return Fingerprint(len(rows), "sha256:" + hashlib.sha256(b"".join(digests)).hexdigest())


def legacy_by_definition(rows) -> Fingerprint:
    """The legacy definition: the sum of the first 8 bytes of md5 of each row's text."""
    total = sum(int(hashlib.md5(row_text(r[:5], TYPES[:5]).encode("utf-8")).hexdigest()[:16], 16)
                for r in rows)
    return Fingerprint(len(rows), str(total))


# --- the engines -----------------------------------------------------------------------------

@pytest.mark.parametrize("settings", ["defaults", "other session settings"])
def test_fingerprints_are_pinned_and_equal_on_every_engine(engine, settings):
    # a value's text must not depend on the session: the time zone changes how a TIMESTAMPTZ
    # prints, extra_float_digits how a PostgreSQL float rounds. On PostgreSQL they are the
    # database's (what a session starts with): one changed inside a session is refused (below)
    if settings != "defaults" and engine.name == "postgresql":
        with engine.session() as session:
            database = session.scalar("SELECT current_database()")
            session.execute(f"ALTER DATABASE \"{database}\" SET TimeZone = 'America/New_York'")
            session.execute(f"ALTER DATABASE \"{database}\" SET extra_float_digits = 0")
    with engine.session() as session:
        if settings != "defaults" and engine.name == "duckdb":
            session.execute("SET TimeZone = 'America/New_York'")
        make_table(session)
        found = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    assert found == GOLDEN


@pytest.mark.parametrize("setting", ["TimeZone = 'America/New_York'", "extra_float_digits = 0",
                                     "search_path = pg_catalog"])
def test_a_setting_changed_inside_a_postgres_session_refuses_its_fingerprints(postgres_url, setting):
    """What code run inside the session (a table owner's trigger) changes there is not the team's:
    a float's text in a row or array rounds at extra_float_digits 0, a search path picks another
    table."""
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.warehouse import engine_for

    engine = engine_for(postgres_url)
    with engine.session() as session:
        make_table(session)
        session.execute(f"SET {setting}")
        with pytest.raises(ForgedRecord, match=f"its {setting.split(' = ')[0]} changed from"):
            fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)


def test_the_pinned_values_are_the_documented_definition():
    for key in KEYS:
        assert GOLDEN[key] == by_definition([r for r in ROWS if r[0] == key]), key
    for key in LEGACY_GOLDEN:
        assert LEGACY_GOLDEN[key] == legacy_by_definition([r for r in ROWS if r[0] == key]), key
    # a duplicated row counts: the pair is not the single row, nor nothing
    assert GOLDEN["2026-01-02"] != by_definition(ROWS[3:4]) and GOLDEN["2026-01-02"] != EMPTY
    assert EMPTY == Fingerprint(0, "sha256:" + hashlib.sha256(b"").hexdigest())


def test_the_legacy_algorithm_is_unchanged_and_computed_only_for_a_record_it_made(engine):
    with engine.session() as session:
        make_table(session)
        legacy = fingerprints_like(session, "golden", LEGACY_COLUMNS, SCHEME, "day", LEGACY_GOLDEN)
        mixed = fingerprints_like(session, "golden", COLUMNS, SCHEME, "day",
                                  {"2026-01-01": LEGACY_GOLDEN["2026-01-01"], "2026-01-02": GOLDEN["2026-01-02"]})
    assert legacy == LEGACY_GOLDEN
    # each key by the algorithm of the record it is compared with, never the legacy one otherwise
    assert mixed["2026-01-02"] == GOLDEN["2026-01-02"] and mixed["2026-01-01"].legacy
    # and the two algorithms can never compare equal, not even on an empty partition
    assert all(LEGACY_GOLDEN[k] != GOLDEN[k] for k in LEGACY_GOLDEN)
    assert [fp.algorithm for fp in (GOLDEN["2026-01-01"], LEGACY_GOLDEN["2026-01-01"])] == ["sha256", "md5-sum"]


def test_the_order_rows_were_written_in_does_not_matter_and_no_rows_is_the_empty_constant(engine):
    with engine.session() as session:
        make_table(session)
        make_table(session, "reversed", list(reversed(ROWS)))
        again = fingerprints(session, "reversed", COLUMNS, SCHEME, "day", KEYS)
        types = column_types(session, "golden", COLUMNS)
        nothing = session.scalar(f"SELECT {digest_sql(session, COLUMNS, types, 't')} FROM golden AS t WHERE FALSE")
    assert again == GOLDEN
    assert nothing == EMPTY.digest


def test_a_fingerprint_prints_short_and_names_a_legacy_one():
    assert str(GOLDEN["2026-01-01"]) == "3 rows #aa74518275ba"
    assert str(LEGACY_GOLDEN["2026-01-01"]) == "3 rows md5-sum #207147824978"


def test_rows_whose_fields_would_run_together_never_share_a_fingerprint(engine):
    """Length prefixes and `~` keep fields apart: each pair below is two different rows whose
    fields, joined naively (or with a separator), read the same."""
    pairs = [(("a", "bc"), ("ab", "c")), ((None, ""), ("", None)), (("~", None), (None, "~")),
             (("1:a", None), ("1", ":a")), (("1:~", "1:~"), ("~", "~1:~1:~")), (("2:ab", ""), ("", "2:ab")),
             (("\u00e9", "x"), ("e\u0301", "x")), (("", ""), (None, None))]
    keys = [f"2026-01-{i:02d}" for i in range(1, 2 * len(pairs) + 1)]
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), tuple(keys), "pairs")
    with engine.session() as session:
        session.execute("CREATE TABLE pairs (day DATE, a VARCHAR, b VARCHAR)")
        for key, row in zip(keys, [row for pair in pairs for row in pair], strict=True):
            session.execute("INSERT INTO pairs VALUES (CAST(? AS DATE), ?, ?)", [key, *row])
        found = fingerprints(session, "pairs", ["a", "b"], scheme, "day", keys)
    assert len({fp.digest for fp in found.values()}) == len(keys), found


def test_float_arrays_keep_every_bit_whatever_the_database_sets(engine):
    """PostgreSQL prints a float inside an array by extra_float_digits, which a database or role
    setting can lower to 0 for every new session: 0.3 and 0.1 + 0.2 would then read the same and
    give one fingerprint to two different rows. Our sessions print floats exactly."""
    keys = ["2026-01-01", "2026-01-02"]
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), tuple(keys), "arrays")
    if engine.name == "postgresql":
        with engine.session() as session:
            database = session.scalar("SELECT current_database()")
            session.execute(f'ALTER DATABASE "{database}" SET extra_float_digits = 0')
    with engine.session() as session:
        session.execute("CREATE TABLE arrays (day DATE, a DOUBLE PRECISION[])")
        session.execute("INSERT INTO arrays VALUES (DATE '2026-01-01', ARRAY[CAST(0.3 AS DOUBLE PRECISION)])")
        session.execute("INSERT INTO arrays VALUES (DATE '2026-01-02', "
                        "ARRAY[CAST(0.1 AS DOUBLE PRECISION) + CAST(0.2 AS DOUBLE PRECISION)])")
        found = fingerprints(session, "arrays", ["a"], scheme, "day", keys)
    assert found["2026-01-01"] != found["2026-01-02"]


def test_a_fingerprint_is_of_a_plain_table_never_of_a_view_or_rows_under_row_security(engine):
    """A view can answer each statement differently (current_query() on both engines): the bytes a
    fingerprint proves would not be those the next statement reads (found by an attack)."""
    from backfill_assets.errors import ForgedRecord

    with engine.session() as session:
        make_table(session)
        session.execute("CREATE VIEW seen AS SELECT * FROM golden")
        assert session.engine.relation_kind(session, "golden") == "table"
        # as a statement's `FROM "SEEN"` resolves it: DuckDB folds case, PostgreSQL keeps it
        assert session.engine.relation_kind(session, "SEEN") == ("view" if engine.name == "duckdb" else None)
        assert session.engine.relation_kind(session, "nothing_here") is None
        with pytest.raises(ForgedRecord, match="seen is a view, not a table"):
            fingerprints(session, "seen", COLUMNS, SCHEME, "day", KEYS)
        with pytest.raises(ForgedRecord, match="is a view"):
            fingerprints_like(session, "seen", LEGACY_COLUMNS, SCHEME, "day", LEGACY_GOLDEN)
        if engine.name == "postgresql":
            session.execute("ALTER TABLE golden ENABLE ROW LEVEL SECURITY")
            with pytest.raises(ForgedRecord, match="golden is a table under row security"):
                fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)


def test_a_view_is_refused_even_beside_a_table_whose_name_differs_only_in_case(postgres_url):
    """Insider (warehouse write). PostgreSQL keeps "SEEN" and seen apart, but relation_kind matches
    lower(relname) and takes the first row, in no order: with a plain table "SEEN" made first, the
    view seen (what `FROM "seen"` reads) is called a 'table', and a view that answers each
    statement differently (current_query()) was fingerprinted as if it were one (found by an
    attack). The name is resolved as the statement resolves it (to_regclass)."""
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.warehouse import engine_for

    engine = engine_for(postgres_url)
    with engine.session() as session:
        make_table(session)
        session.execute('CREATE TABLE "SEEN" AS SELECT * FROM golden')  # the decoy, made first
        session.execute("CREATE VIEW seen AS SELECT * FROM golden WHERE current_query() LIKE '%sha256%' "
                        "UNION ALL SELECT * FROM golden WHERE current_query() NOT LIKE '%sha256%'")
        with pytest.raises(ForgedRecord, match="is a view"):
            fingerprints(session, "seen", COLUMNS, SCHEME, "day", KEYS)
