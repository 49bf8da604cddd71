"""What a signature authorises: a short text statement naming the action, where and until when.

An approver never signs a bare hash. They sign a statement that binds what will run (the plan's
sha256 and the code identity of its table), where (the warehouse's id, created by `backfill init`)
and until when (an expiry), so a plan signed in staging is void in production, a signature cannot
authorise other code, and an old signature stops authorising anything:

    backfill-assets plan approval
    plan: 3f2a...
    code: 2/9c1e...
    warehouse: wh-5d0c...
    signed: 2026-12-01T21:39:20Z
    expires: 2026-12-15T21:39:20Z

A version that would replace a plan's plan of record (the plan file edited after its approval)
is approved by a `plan replacement` statement: the same fields and `replaces`, naming the plan of
record and its adoption by the keyed hash of the evidence row that recorded it. No signature made
before that adoption can name it, whatever time its statement says (a `signed:` line is the
signer's claim: statements dated ahead and held back brought a superseded version back, found by
an attack), and each adoption is named once, so none counts twice (A, then B, then A again).

The same form, with other fields, authorises a change of the trust root and the rollback of a
published plan. Parsing is strict: the exact header, the kind's fields in order, nothing else.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from backfill_assets.errors import SignatureError

HEADER = "backfill-assets"
PLAN_APPROVAL = "plan approval"
PLAN_REPLACEMENT = "plan replacement"
APPROVALS = (PLAN_APPROVAL, PLAN_REPLACEMENT)  # each approves the plan it names
TRUST_ROOT = "trust root"
ROLLBACK = "rollback"
# a rollback that leaves tables computed from the plan's partitions as they are (`--keep-computed`):
# its signers name them (a whole rollback's signatures had an operator add the option)
ROLLBACK_KEEPING = "rollback keeping computed"
# the fields each kind binds, in order, before `signed` and `expires`
FIELDS: dict[str, tuple[str, ...]] = {
    PLAN_APPROVAL: ("plan", "code", "warehouse"),
    PLAN_REPLACEMENT: ("plan", "replaces", "code", "warehouse"),
    TRUST_ROOT: ("warehouse", "replaces", "signers", "policy"),
    ROLLBACK: ("plan", "warehouse"),
    ROLLBACK_KEEPING: ("plan", "warehouse", "keep"),
}
MAX_TEXT = 4096
CLOCK_SKEW = dt.timedelta(minutes=10)  # a signer's clock may run this much ahead of ours
_VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,254}[\x21-\x7e])?")
# fields whose values have one form: a replacement names a plan of record as `sha256@adoption row
# hash`, so a signed statement in another spelling is refused as it is read (verified and recorded,
# it could never be mirrored into the plan file, and every later approval failed: found by an attack)
_FORMS = {(PLAN_REPLACEMENT, "replaces"): (re.compile(r"[0-9a-f]{64}@[0-9a-f]{64}"),
                                           "the plan of record's sha256 and its adoption row's hash, "
                                           "sha256@hash in lowercase hex"),
          (ROLLBACK_KEEPING, "keep"): (re.compile(r"[A-Za-z_][A-Za-z0-9_/]*(?:,[A-Za-z_][A-Za-z0-9_/]*)*"),
                                       "the tables left, comma-separated, in sorted order")}
_FIX = "sign the statement printed by `backfill plan statement` (or `approvers statement`) unchanged"


def utc(moment: dt.datetime) -> dt.datetime:
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)


def stamp(moment: dt.datetime) -> str:
    return utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def _moment(text: str, field: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise SignatureError(f"statement field {field} {text[:40]!r} is not a UTC time like "
                             "2026-12-01T21:39:20Z", fix=_FIX) from None


@dataclass(frozen=True)
class Statement:
    kind: str
    values: tuple[tuple[str, str], ...]  # the kind's fields, in order
    signed: dt.datetime
    expires: dt.datetime

    @classmethod
    def make(cls, kind: str, *, signed: dt.datetime, expires: dt.datetime, **values: str) -> Statement:
        names = FIELDS[kind]
        if set(values) != set(names):
            raise SignatureError(f"a {kind} statement binds {', '.join(names)}", fix=_FIX)
        for name in names:
            if not _VALUE.fullmatch(values[name]):
                raise SignatureError(f"statement field {name} {values[name][:40]!r} is not one line of "
                                     "printable ASCII", fix=_FIX)
            form = _FORMS.get((kind, name))
            if form is not None and not form[0].fullmatch(values[name]):
                raise SignatureError(f"statement field {name} {values[name][:40]!r}... is not {form[1]}", fix=_FIX)
        signed, expires = utc(signed), utc(expires)
        if expires <= signed:
            raise SignatureError(f"the statement expires ({stamp(expires)}) before it is signed "
                                 f"({stamp(signed)})", fix="give an expiry after the signing time")
        return cls(kind, tuple((n, values[n]) for n in names), signed, expires)

    def __getitem__(self, name: str) -> str:
        return dict(self.values)[name]

    def get(self, name: str) -> str | None:
        return dict(self.values).get(name)

    @property
    def text(self) -> str:
        lines = [f"{HEADER} {self.kind}", *(f"{n}: {v}" for n, v in self.values),
                 f"signed: {stamp(self.signed)}", f"expires: {stamp(self.expires)}"]
        return "\n".join(lines) + "\n"

    @property
    def message(self) -> bytes:
        """The exact bytes signed."""
        return self.text.encode("ascii")

    @classmethod
    def parse(cls, text: str | bytes) -> Statement:
        if isinstance(text, bytes):
            text = text.decode("ascii", errors="replace")
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise SignatureError("a statement is at most 4 KiB of text", fix=_FIX)
        if not text.endswith("\n") or "\r" in text:
            raise SignatureError("a statement is lines ending in a newline (no CR)", fix=_FIX)
        lines = text[:-1].split("\n")
        head = lines[0]
        kind = head[len(HEADER) + 1:] if head.startswith(HEADER + " ") else ""
        if kind not in FIELDS:
            raise SignatureError(f"statement header {head[:60]!r} is not one of "
                                 + ", ".join(f"'{HEADER} {k}'" for k in FIELDS), fix=_FIX)
        names = (*FIELDS[kind], "signed", "expires")
        if len(lines) != 1 + len(names):
            raise SignatureError(f"a {kind} statement has the lines {', '.join(names)} after its header, "
                                 f"found {len(lines) - 1}", fix=_FIX)
        found: dict[str, str] = {}
        for name, line in zip(names, lines[1:], strict=True):
            prefix = f"{name}: "
            if not line.startswith(prefix):
                raise SignatureError(f"statement line {line[:40]!r} should start with {prefix!r}", fix=_FIX)
            found[name] = line[len(prefix):]
        signed, expires = _moment(found.pop("signed"), "signed"), _moment(found.pop("expires"), "expires")
        statement = cls.make(kind, signed=signed, expires=expires, **found)
        if statement.text != text:  # one spelling per statement: what is shown is what was signed
            raise SignatureError("the statement is not in its canonical form", fix=_FIX)
        return statement

    def timing_problem(self, now: dt.datetime, max_valid: dt.timedelta) -> str | None:
        """Why the statement is not valid at `now` under a policy allowing `max_valid`, or None."""
        now = utc(now)
        if self.expires - self.signed > max_valid:
            return (f"valid for {(self.expires - self.signed).days} day(s), longer than the policy's "
                    f"{max_valid.days}")
        if self.signed > now + CLOCK_SKEW:
            return f"signed in the future ({stamp(self.signed)})"
        if now >= self.expires:
            return f"expired at {stamp(self.expires)}"
        return None
