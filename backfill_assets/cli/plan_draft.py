"""`plan new` fills, in the template's text, what the loaded definitions answer: the source of truth,
the table's metrics, the graph of replayable tables the window reaches with their windows, the
consumers to tell (with their owners where Dagster knows them) and a proof partition (the
window's first). People still write what only they know: the reason, the mode, the rollback.

The template is edited as text so its comments stay; a block whose shape is not the expected one
is left as it is, to be filled by hand.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from backfill_assets.errors import WindowError

if TYPE_CHECKING:
    from backfill_assets.loaded_defs import LoadedTable


def _value(text: str) -> str:
    """A YAML scalar for any key: a JSON string is a YAML double-quoted string."""
    return text if re.fullmatch(r"[A-Za-z0-9_][\w./:@+-]*", text) and not re.fullmatch(r"[\d.:-]+", text) \
        else json.dumps(text)


def _replace(text: str, pattern: str, new: str) -> tuple[str, bool]:
    out, count = re.subn(pattern, lambda _: new, text, count=1, flags=re.MULTILINE)
    return out, bool(count)


def prefill(text: str, table: LoadedTable, start: str | None, end: str | None) -> tuple[str, list[str]]:
    """The template `text` with what `table` (a loaded table, its graph attached) answers; and what
    was filled, one short phrase each."""
    spec, filled = table.spec, []
    text, done = re.subn(r"^(source_of_truth:\s*)TODO", lambda m: m.group(1) + _value(spec.source), text,
                         count=1, flags=re.MULTILINE)
    if done:
        filled.append(f"source_of_truth {spec.source}")
    metrics = [m.name for m in spec.metrics]
    if start and end and table.graph is not None:  # the gates judge every table of the graph by them
        try:
            members = table.graph.derive(spec.name, table.scheme().window(start, end))[1:]
        except WindowError:
            members = []  # `plan validate` names the window's problem
        common = [n for n in metrics if all(n in {m.name for m in table.graph.spec(member.asset).metrics}
                                            for member in members)]
        metrics = common or metrics  # none in common: `plan validate` names the one to drop
    entries = "".join(f"    - name: {name}\n" for name in metrics)
    text, done = _replace(text, r"^    - name: TODO[^\n]*\n      tolerance_abs: 0[^\n]*\n  contract:[^\n]*\n",
                          "    # exactly (right for DECIMAL money and counts) unless given tolerance_abs: 0.05 (in\n"
                          "    # the metric's unit) or tolerance_pct: 0.01 (0.01% of the source figure)\n"
                          + entries + "  contract:\n")
    if done:
        filled.append(f"gates.metrics ({', '.join(metrics)})")
    if not (start and end):
        return text, filled
    try:
        keys = table.scheme().window(start, end)
    except WindowError:
        return text, filled  # `plan validate` names the window's problem
    text, done = _replace(text, r"^(  proof_partitions: )\[TODO\]", f"  proof_partitions: [{_value(keys[0])}]")
    if done:
        filled.append(f"execution.proof_partitions [{keys[0]}]")
    if table.graph is None:
        return text, filled
    from backfill_assets.graph import asset_key

    members = table.graph.derive(spec.name, keys)
    if len(members) > 1:
        block = "graph:                      # every replayable table computed from the target: recomputed, " \
                "gated and published with it\n" + "".join(
                    f"  - asset: {m.asset}\n    window: {{start: {_value(m.keys[0])}, end: {_value(m.keys[-1])}}}\n"
                    for m in members[1:])
        text, done = _replace(text, r"^# graph:[^\n]*\n(?:#  [^\n]*\n)*", block)
        if done:
            filled.append(f"graph ({', '.join(m.asset for m in members[1:])})")
    consumers = table.graph.consumers(members)
    if consumers:
        lines = []
        for consumer in consumers:
            try:
                owners = list(table.graph.asset_graph.get(asset_key(consumer.asset)).owners)
            except Exception:  # noqa: BLE001 - owners are a convenience; people fill them otherwise
                owners = []
            shown = ", ".join(_value(o) for o in owners) or "TODO"
            lines.append(f"  - asset: {consumer.asset}\n    owners: [{shown}]\n")
        text, done = _replace(text, r"^(downstream:[^\n]*\n)  - asset: TODO\n    owners: \[TODO\]\n",
                              "downstream:                 # consumers of the replayed data, told when publish "
                              "freezes and reopens\n" + "".join(lines))
        if done:
            filled.append(f"downstream ({', '.join(c.asset for c in consumers)})")
    return text, filled
