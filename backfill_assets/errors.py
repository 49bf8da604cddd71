"""One exception tree for the whole product.

Every error names what was wrong and how to fix it in one line; the CLI prints ``str(error)`` and
exits with ``error.exit_code`` (1: refused / incomplete / unapproved, 2: unreadable input or misuse).
"""

from __future__ import annotations

from collections.abc import Sequence

# a Ctrl-C, from the first import on: one line and 128 + SIGINT, never Python's traceback
INTERRUPTED = "backfill: interrupted; every partition is either old or new\n"
INTERRUPTED_EXIT = 130


def printable(text: object) -> str:
    """`text` on one line as a terminal shows it: each character that is not printable as its escape
    (a file name is a pull request's too: a line break and ESC[8m in it forge and conceal lines)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class BackfillError(Exception):
    """Base of every error the product raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        self.details: str | None = None  # a traceback or log worth keeping: written to the log file
        super().__init__(f"{message}: {fix}" if fix else message)


class UsageError(BackfillError):
    """The command was misused (bad option, unknown plan, file not found)."""

    exit_code = 2


class PlanReadError(BackfillError):
    """The plan file cannot be read or parsed."""

    exit_code = 2


class PlanProblem:
    """One problem in a plan: the key, the bad value, and the fix."""

    __slots__ = ("key", "value", "fix")

    def __init__(self, key: str, value: object, fix: str) -> None:
        self.key = key
        self.value = value
        self.fix = fix

    def __str__(self) -> str:
        # a key comes from the file: escape line breaks so it cannot forge more problem lines
        key = printable(self.key[:80])
        if self.value == "<missing>":
            return f"{key} is missing: {self.fix}"
        shown = repr(self.value)
        if len(shown) > 60:  # a hostile value must not flood the terminal
            shown = shown[:57] + "..."
        return f"{key} = {shown}: {self.fix}"

    def __repr__(self) -> str:
        return f"PlanProblem({self.key!r}, {self.value!r}, {self.fix!r})"


MAX_PROBLEMS_SHOWN = 40


class PlanInvalidError(BackfillError):
    """The plan parsed but is incomplete or wrong; carries every problem found."""

    def __init__(self, path: str, problems: Sequence[PlanProblem]) -> None:
        self.path = path
        self.problems = list(problems)
        # the file's name is a pull request's too: escaped, a line break and ESC[8m in it printed a
        # forged `(approved)` line on a reviewer's screen and concealed the problems (found by an attack)
        if len(self.problems) == 1:  # one problem, one line, as every other bad input gets
            super().__init__(f"{printable(path)}: {self.problems[0]}")
            return
        shown = self.problems[:MAX_PROBLEMS_SHOWN]
        lines = "\n".join(f"  - {p}" for p in shown)
        if len(self.problems) > len(shown):
            lines += f"\n  ... and {len(self.problems) - len(shown)} more"
        super().__init__(f"{printable(path)}: {len(self.problems)} problem(s)\n{lines}")


class ApprovalError(BackfillError):
    """An approval was refused (owner, repeat approver, invalid plan)."""


class PlanRefused(BackfillError):
    """The plan may not run (not approved, edited since approval, wrong phase)."""


class PhaseError(BackfillError):
    """An illegal phase transition was asked for."""


class PartitionRefused(BackfillError):
    """The write permission refused a partition."""

    def __init__(self, message: str, *, plan_id: str | None, partition: str, fix: str) -> None:
        self.plan_id = plan_id
        self.partition = partition
        super().__init__(message, fix=fix)


class WindowError(BackfillError):
    """A window or partition list is outside what the asset or plan allows."""

    exit_code = 2


class WarehouseError(BackfillError):
    """The warehouse refused an operation (lock held too long, missing table, bad identifier)."""


class LockWaitTimeout(WarehouseError):
    """Waiting for a warehouse lock (the DuckDB file, a PostgreSQL lock) ran out of time: the
    warehouse is busy, not broken, and the same step can simply be tried again later."""


class IdentifierError(WarehouseError):
    """An identifier from configuration is not a plain SQL identifier."""

    exit_code = 2


class WriteRefused(WarehouseError):
    """A partition write would lose data (e.g. an empty recomputation over existing rows)."""


class PublishBlocked(BackfillError):
    """Publish may not reopen yet; the message says what blocks it."""


class RunNotRecorded(BackfillError):
    """The warehouse committed what a run did, but Dagster could not record the run (its storage
    failed after the commit): the command says what happened, not that nothing did."""


class RollbackRefused(BackfillError):
    """A rollback cannot be done safely (a later plan wrote the same partitions)."""


class EvidenceChainBroken(BackfillError):
    """The evidence log's hash chain does not verify."""

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        super().__init__(
            f"evidence row {seq} does not verify ({reason})",
            fix="the control record was edited outside backfill; restore it from backup",
        )


class PrincipalError(BackfillError):
    """A name (owner, approver, actor) is not a canonical ASCII principal."""

    exit_code = 2


class SignatureError(BackfillError):
    """An SSH signature is malformed, does not verify, or its key is not allowed for the principal."""


class PolicyError(BackfillError):
    """The team's policy file cannot be read or is malformed."""

    exit_code = 2


class TrustRootError(BackfillError):
    """The trust root (allowed_signers and policy) is missing, or a change of it lacks its quorum."""


class ForgedRecord(BackfillError):
    """A control-record row does not match the keyed evidence chain or its signatures: someone
    wrote the warehouse outside backfill. Decisions refuse to act on it."""


class AllowedSignersError(BackfillError):
    """The allowed_signers file cannot be read or has a malformed line."""

    exit_code = 2
