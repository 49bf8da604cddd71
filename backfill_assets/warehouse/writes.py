"""Partition writes by mode, several partitions at once. Each runs inside the caller's
transaction, so a crash at any point leaves every partition old or new, never half.

- overwrite: delete the partitions, insert the recomputation.
- merge: upsert on the business keys within each partition (rows the recomputation no longer
  yields are kept).
- replay: insert only the rows whose event id (or business keys) is absent from their partition,
  so a second replay adds nothing.

The recomputation of each partition is staged first (the source is read once per partition),
tagged with the partition it was computed for; checks, the fingerprint of an overwrite and the
write itself then run once for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from backfill_assets.errors import WriteRefused
from backfill_assets.identifiers import quote
from backfill_assets.partitions import PartitionScheme, rename_partition_params
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.ddl import create_sql
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, column_types, digest_sql, fingerprints
from backfill_assets.warehouse.grouping import rows_per_partition
from backfill_assets.warehouse.partition_sql import inside_sql, many_predicate

MODES = ("overwrite", "merge", "replay")
STAGE_PREFIX = "backfill_stage"  # the engine names the session-temporary table, unique per write
# the partition a staged row was computed for: its place in the slice and its bounds
SLOT, LO, HI = "backfill_stage_slot", "backfill_stage_lo", "backfill_stage_hi"


def ensure_table(session: Session, spec: TableSpec, table: str | None = None) -> None:
    session.execute(create_sql(spec, table))


def copy_partitions(session: Session, spec: TableSpec, scheme: PartitionScheme, source: str, target: str,
                    keys: Sequence[str], between: Callable[[], None] | None = None) -> int:
    """Replace the partitions `keys` of `target` by those of `source` (tables with the spec's
    columns): delete, then insert, in the caller's transaction; `between` runs between the two.
    Returns the rows `target` holds in them after."""
    cols = ", ".join(quote(c) for c in spec.columns)
    where, params = many_predicate(scheme, quote(spec.partition_column), keys)
    session.execute(f"DELETE FROM {quote(target)} WHERE {where}", params)
    if between is not None:
        between()
    session.execute(f"INSERT INTO {quote(target)} ({cols}) SELECT {cols} FROM {quote(source)} WHERE {where}", params)
    return int(session.scalar(f"SELECT count(*) FROM {quote(target)} WHERE {where}", params))


def _stage(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str]) -> str:
    """Materialize each partition's recomputation once into a temp table, tagged with its key; its
    name, in the engine's temporary schema (an unqualified name could be a user's own table)."""
    cols = ", ".join(quote(c) for c in spec.columns)
    part = quote(spec.partition_column)
    STAGE = session.engine.temp_table_name(STAGE_PREFIX)  # read like the constant it was
    # typed like the target, then filled: CREATE TABLE AS cannot take parameters on every engine
    session.execute(f"CREATE TEMP TABLE {STAGE} AS SELECT {cols}, 0 AS {SLOT}, {part} AS {LO}, {part} AS {HI} "
                    f"FROM {quote(spec.table)} WHERE FALSE")
    kind = spec.column(spec.partition_column).type  # typed: a NULL end is not text on every engine
    if spec.range_form:
        _stage_ranges(session, spec, scheme, keys, STAGE, cols, kind)
        return STAGE
    # one INSERT for all the partitions: each recomputation a branch of a UNION ALL, its
    # $partition parameters renamed apart (a statement a partition cost ~3 ms of overhead each)
    branches, params = [], {}
    for slot, key in enumerate(keys):
        lo, hi = scheme.bounds(key)
        sql = session.engine.team_sql(session.engine.named(rename_partition_params(spec.select_sql, f"_{slot}")))
        params.update({f"{name}_{slot}": value for name, value in scheme.params_for(spec.select_sql, key).items()})
        params.update({f"{SLOT}_{slot}": slot, f"{LO}_{slot}": lo, f"{HI}_{slot}": hi})
        branches.append(f"SELECT {cols}, CAST(${SLOT}_{slot} AS INTEGER), CAST(${LO}_{slot} AS {kind}), "
                        f"CAST(${HI}_{slot} AS {kind}) FROM ({sql}) AS s")
    session.execute(f"INSERT INTO {STAGE} ({cols}, {SLOT}, {LO}, {HI}) {' UNION ALL '.join(branches)}", params)
    return STAGE


def _stage_ranges(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str], stage: str,
                  cols: str, kind: str) -> None:
    """A table in range form: one recomputation per run of consecutive keys, bound to the run's
    whole window (one scan of the source), each row given the slot of the key its partition
    column falls in; a row in none of them gets slot -1 and is refused by the caller."""
    part = quote(spec.partition_column)
    slots = {key: slot for slot, key in enumerate(keys)}
    values, params = [], {}
    for key, slot in slots.items():
        lo, hi = scheme.bounds(key)
        values.append([f"CAST(${SLOT}_{slot} AS INTEGER)", f"CAST(${LO}_{slot} AS {kind})",
                       f"CAST(${HI}_{slot} AS {kind})"])
        params.update({f"{SLOT}_{slot}": slot, f"{LO}_{slot}": lo, f"{HI}_{slot}": hi})
    windows = session.engine.values_sql(values, (SLOT, LO, HI), "k")
    branches = []
    for n, (first, last) in enumerate(scheme.runs(keys)):
        sql = session.engine.team_sql(session.engine.named(rename_partition_params(spec.select_sql, f"_r{n}")))
        params[f"partition_start_r{n}"] = scheme.params_for("$partition_start", first)["partition_start"]
        params[f"partition_end_r{n}"] = scheme.params_for("$partition_end", last)["partition_end"]
        inside = inside_sql(scheme, f"s.{part}", f"k.{LO}", f"k.{HI}")
        branches.append(f"SELECT {', '.join('s.' + quote(c) for c in spec.columns)}, coalesce(k.{SLOT}, -1), "
                        f"k.{LO}, k.{HI} FROM ({sql}) AS s LEFT JOIN {windows} ON {inside}")
    session.execute(f"INSERT INTO {stage} ({cols}, {SLOT}, {LO}, {HI}) {' UNION ALL '.join(branches)}", params)


def write_rows(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
               mode: str, *, allow_empty: bool = False) -> dict[str, tuple[int, Fingerprint]]:
    """Write these partitions by `mode`; return, per key, the rows its recomputation yielded and
    the partition's fingerprint after the write."""
    if mode not in MODES:
        raise WriteRefused(f"unknown write mode {mode!r}", fix=f"use one of {', '.join(MODES)}")
    keys = list(dict.fromkeys(keys))
    STAGE = _stage(session, spec, scheme, keys)  # the fingerprint lines below name it so
    target, part = quote(spec.table), quote(spec.partition_column)
    inside = inside_sql(scheme, f"s.{part}", f"s.{LO}", f"s.{HI}")
    # an overwrite leaves exactly the staged rows in each partition: fingerprint them here, as
    # values of the target's columns (the stage was made from the target, so its types are those)
    fp = f", {digest_sql(session, spec.columns, column_types(session, spec.table, spec.columns), 's')}" \
        if mode == "overwrite" else ""
    found = {int(row[0]): row[1:] for row in session.rows(
        f"SELECT s.{SLOT}, count(*), {session.engine.count_where_sql(f's.{part} IS NULL OR NOT {inside}')}{fp} "
        f"FROM {STAGE} AS s GROUP BY s.{SLOT}")}
    if -1 in found:  # range form: rows of no partition of the run
        raise WriteRefused(
            f"the recomputation of {spec.name} partitions {keys[0]}..{keys[-1]} yielded {int(found[-1][0])} row(s) "
            f"whose {spec.partition_column} is in none of them",
            fix="make select_sql filter on $partition_start and $partition_end and return each row's partition")
    staged = {key: int(found[slot][0]) if slot in found else 0 for slot, key in enumerate(keys)}
    for slot, key in enumerate(keys):
        stray = int(found[slot][1]) if slot in found else 0
        if stray:
            # a row for another partition would land where no snapshot was taken
            raise WriteRefused(
                f"the recomputation of {spec.name} partition {key} yielded {stray} row(s) whose "
                f"{spec.partition_column} is outside {key}",
                fix="make select_sql filter on $partition and return it as the partition column")
    empty = [k for k in keys if staged[k] == 0]
    if empty and not allow_empty:
        held = rows_per_partition(session, spec.table, spec.partition_column, scheme, empty)
        for key in empty:
            if held.get(key):
                raise WriteRefused(
                    f"the recomputation of {spec.name} partition {key} yielded no rows where {held[key]} "
                    "exist", fix="check the source for that partition, or set "
                    "execution.allow_empty_partitions: true in the plan if it is really empty")
    cols = ", ".join(quote(c) for c in spec.columns)
    where, params = many_predicate(scheme, f"t.{part}", keys)
    same_partition = inside_sql(scheme, f"t.{part}", f"s.{LO}", f"s.{HI}")
    if mode == "overwrite":
        session.execute(f"DELETE FROM {target} AS t WHERE {where}", params)
        session.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {STAGE}")
    elif mode == "merge":
        # delete what the recomputation replaces, inside its own partition only, then insert it
        match = session.engine.keys_match_sql("t", "s", [quote(k) for k in spec.business_keys], spec.key_types)
        session.execute(f"DELETE FROM {target} AS t WHERE {where} AND EXISTS "
                        f"(SELECT 1 FROM {STAGE} AS s WHERE {same_partition} AND {match})", params)
        session.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {STAGE}")
    else:
        on = (spec.event_id_column,) if spec.event_id_column else spec.business_keys
        match = session.engine.keys_match_sql("t", "s", [quote(k) for k in on],
                                              [spec.column(k).type for k in on])
        session.execute(
            f"INSERT INTO {target} ({cols}) SELECT {', '.join('s.' + quote(c) for c in spec.columns)} "
            f"FROM {STAGE} AS s WHERE NOT EXISTS (SELECT 1 FROM {target} AS t WHERE {same_partition} "
            f"AND {match})")
    session.execute(f"DROP TABLE {STAGE}")
    if mode == "overwrite":
        after = {key: Fingerprint(staged[key], str(found[slot][2])) if slot in found else EMPTY
                 for slot, key in enumerate(keys)}
    else:
        after = fingerprints(session, spec.table, spec.columns, scheme, spec.partition_column, keys)
    return {key: (staged[key], after[key]) for key in keys}

