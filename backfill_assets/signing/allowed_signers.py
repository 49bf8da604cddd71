"""OpenSSH ``allowed_signers`` files (man ssh-keygen, ALLOWED SIGNERS): who may sign with which key.

Line format: ``principals [options] keytype base64-key [comment]``. The file is the one git's
gpg.ssh.allowedSignersFile reads, parsed more strictly: an approval names one person, so principal
patterns (``*``, ``?``, ``!``) are refused, as are certificate authorities; and times without a
``Z`` are read as UTC (OpenSSH reads them in local time), so a check gives one answer everywhere.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import operator
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path
from typing import Any

from backfill_assets.bounded import NotRegularFile, read_regular
from backfill_assets.errors import AllowedSignersError, PrincipalError, SignatureError
from backfill_assets.signing import sshsig
from backfill_assets.signing.principals import canonical_principal
from backfill_assets.signing.sshsig import NAMESPACE, Signature

MAX_FILE_BYTES = 1024 * 1024
_MISSING_FIX = ("create it (one line per approver: `alice ssh-ed25519 AAAA...`) "
                "or set BACKFILL_ALLOWED_SIGNERS")
_TIME = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})(?:([0-9]{2})([0-9]{2})([0-9]{2})?)?[Zz]?")
_KEY_TYPES = (*sshsig.KEY_TYPES, *sshsig.SK_KEY_TYPES)


@dataclass(frozen=True)
class SignerEntry:
    """One line of the file: these principals may sign with this key, in these namespaces and times."""

    line: int
    principals: tuple[str, ...]
    public_key: bytes  # canonical SSH wire blob
    namespaces: tuple[str, ...] | None = None  # None: every namespace
    valid_after: datetime | None = None
    valid_before: datetime | None = None
    comment: str = ""
    skipped: str | None = None  # why OpenSSH skips the line: its key is no one's under it

    @property
    def fingerprint(self) -> str:
        return sshsig.fingerprint(self.public_key)

    def refusal(self, namespace: str, at: datetime) -> str | None:
        """Why this line does not allow signing in ``namespace`` at ``at``; None if it does."""
        if self.skipped is not None:
            return f"{self.skipped} (line {self.line})"
        if self.namespaces is not None and not _allows(self.namespaces, namespace):
            return f"only for namespaces {','.join(self.namespaces)[:80]} (line {self.line})"
        if self.valid_after is not None and at < self.valid_after:
            return f"not valid until {_iso(self.valid_after)} (line {self.line})"
        if self.valid_before is not None and at > self.valid_before:
            return f"expired at {_iso(self.valid_before)} (line {self.line})"
        return None


@dataclass(frozen=True)
class AllowedSigners:
    """A parsed allowed_signers file and the sha256 of its text (to record which file was used)."""

    entries: tuple[SignerEntry, ...]
    source: str
    sha256: str
    text: str | None = None  # the file as read: what the control record pins
    skipped: tuple[str, ...] = ()  # read as pinned: why each line refused today allows nothing

    @classmethod
    def load(cls, path: str | Path) -> AllowedSigners:
        path = Path(path)
        try:
            data = read_regular(path, MAX_FILE_BYTES)  # a FIFO or device is refused unread
        except NotRegularFile as exc:
            raise AllowedSignersError(f"allowed_signers file {path} is {exc.kind}, not a regular file",
                                      fix=_MISSING_FIX) from None
        except FileNotFoundError:
            raise AllowedSignersError(f"allowed_signers file {path} does not exist",
                                      fix=_MISSING_FIX) from None
        except OSError as exc:
            raise AllowedSignersError(f"cannot read allowed_signers file {path} ({exc.strerror})",
                                      fix=_MISSING_FIX) from None
        if len(data) > MAX_FILE_BYTES:
            raise AllowedSignersError(f"{path} is larger than {MAX_FILE_BYTES} bytes",
                                      fix="keep one line per approver key")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AllowedSignersError(f"{path} is not UTF-8 text (byte {exc.start})",
                                      fix="save it as plain UTF-8 text") from None
        return cls.parse(text, source=str(path))

    @classmethod
    def parse(cls, text: str, source: str = "allowed_signers", *, pinned: bool = False) -> AllowedSigners:
        """`pinned`: the text a trust root pinned, maybe under an earlier release that read a line this
        one refuses (an unquoted option value, a hidden character): such a line allows nothing, as
        OpenSSH skips it, and the rest reads. Refused there, the pinned root itself was, by every
        command, `approvers pin` included: no command could move the warehouse off it (found by an
        attack). Its text is checked against its sha256 and the chain, so nobody chose it since."""
        if not isinstance(text, str):
            raise AllowedSignersError(f"{source} is a {type(text).__name__}, not text", fix=_MISSING_FIX)
        if len(text) > MAX_FILE_BYTES:
            raise AllowedSignersError(f"{source} is larger than {MAX_FILE_BYTES} characters",
                                      fix="keep one line per approver key")
        entries, skipped = [], []
        for number, line in enumerate(text.split("\n"), start=1):
            stripped = line.removesuffix("\r").strip(" \t")  # a CRLF file's lines too
            if stripped and not stripped.startswith("#"):
                try:
                    entries.append(_parse_line(stripped, number, source))
                except AllowedSignersError as exc:
                    if not pinned:
                        raise
                    skipped.append(exc.message)
        digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
        return cls(tuple(entries), source, digest, text, tuple(skipped))

    def keys_of(self, principal: str) -> frozenset[bytes]:
        """Every key (canonical blob) listed for `principal`: the owner is excluded by these."""
        return frozenset(e.public_key for e in self.entries if principal in e.principals)

    @property
    def principals(self) -> frozenset[str]:
        return frozenset(p for e in self.entries for p in e.principals)

    def principals_for(self, public_key: str | bytes) -> list[str]:
        """Every principal listed for ``public_key`` (a ``ssh-ed25519 AAAA...`` line or a blob)."""
        blob = key_blob(public_key)
        found: list[str] = []
        for entry in self.entries:
            if entry.public_key == blob:
                found.extend(p for p in entry.principals if p not in found)
        return found

    def verify_approval(self, principal: str, message: bytes, signature: str, namespace: str = NAMESPACE,
                        at: datetime | None = None) -> Signature:
        """The signature verifies AND this file lists its key for ``principal``, ``namespace`` and ``at``."""
        name = canonical_principal(principal, "approver")
        sig = sshsig.verify_cached(message, signature, namespace)
        at = datetime.now(UTC) if at is None else at if at.tzinfo else at.replace(tzinfo=UTC)
        blob = key_blob(sig.public_key)
        entries = [e for e in self.entries if e.public_key == blob and name in e.principals]
        if not entries:
            others = self.principals_for(blob)
            listed = f" (it is listed for {', '.join(others)})" if others else ""
            raise SignatureError(
                f"signed by key {sig.fingerprint}, which {self.source} does not list for {name}{listed}",
                fix=f"sign with a key listed for {name} or add `{name} {sig.public_key_line}` to it",
            )
        reasons = [e.refusal(namespace, at) for e in entries]
        if None in reasons:
            return sig
        raise SignatureError(f"key {sig.fingerprint} is listed for {name} in {self.source} but {reasons[0]}",
                             fix=f"update {name}'s line in {self.source} or sign with a currently valid key")

    def valid_until(self, principal: str, public_key: str | bytes, namespace: str = NAMESPACE,
                    at: datetime | None = None) -> datetime | None:
        """Until when this file lets ``principal`` sign with ``public_key`` in ``namespace`` (its
        lines' `valid-before`; None: no end), among the lines that allow it at ``at``."""
        at = datetime.now(UTC) if at is None else at if at.tzinfo else at.replace(tzinfo=UTC)
        blob = key_blob(public_key)
        ends = [e.valid_before for e in self.entries if e.public_key == blob and principal in e.principals
                and e.refusal(namespace, at) is None]
        return None if not ends or None in ends else max(e for e in ends if e is not None)


def key_blob(key: str | bytes) -> bytes:
    """The canonical wire blob of ``key``, given as a blob or a ``ssh-ed25519 AAAA... [comment]`` line."""
    blob = key if isinstance(key, bytes) else _line_blob(key)
    if sshsig.key_type_of(blob) in sshsig.SK_KEY_TYPES:
        return blob
    # Re-serialise so two encodings of one key (e.g. an RSA modulus with a spare zero) compare equal.
    return sshsig.canonical_blob(blob)


def _refuse_hidden_characters(line: str, comment_at: int, number: int, source: str) -> None:
    """OpenSSH splits a line's fields on space and tab only: with a carriage return, a form feed, a
    no-break or a line-separator space in it, `alice KEY_A<CR>bob KEY_B` is no key to OpenSSH but
    shows on a terminal as bob's line, and split on every space here it listed key A for alice
    (found by an attack); `alice<NBSP> KEY` is no principal alice to OpenSSH. So the fields before
    the key's comment (`line[:comment_at]`) hold no control, invisible or other space character;
    the comment, which OpenSSH ignores, only none that changes how a line shows (a control
    character, a line or paragraph separator, a direction override): a name in any script stays."""
    for at, ch in enumerate(line):
        category = unicodedata.category(ch)
        hidden = (category in _HIDDEN_IN_FIELDS) if at < comment_at else \
            (category in _HIDDEN_IN_COMMENT or ch in _DIRECTION_CONTROLS)
        if ch not in " \t" and hidden:
            raise AllowedSignersError(
                f"{source} line {number} holds the character U+{ord(ch):04X} ({unicodedata.name(ch, 'a control')})"
                + (": OpenSSH reads no key from such a line" if at < comment_at else
                   " in its comment: a terminal may show another line"),
                fix="write each line with spaces or tabs between its fields, one line per key")


# control characters, invisible format characters and spaces other than space and tab
_HIDDEN_IN_FIELDS = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
_HIDDEN_IN_COMMENT = frozenset({"Cc", "Zl", "Zp"})
_DIRECTION_CONTROLS = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _line_blob(line: str) -> bytes:
    # fields split as OpenSSH splits them (space and tab): any other space stays in the key, which
    # then is no base64
    parts = [p for p in re.split(r"[ \t]+", line.strip()) if p] if isinstance(line, str) else []
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        raise SignatureError(f"{str(line)[:60]!r} is not an SSH public key line",
                             fix="give the key as `ssh-ed25519 AAAA...`, copied from the .pub file") from None
    if sshsig.key_type_of(blob) != parts[0]:
        raise SignatureError(f"public key line says {parts[0][:40]!r} but holds another key type",
                             fix="copy the line from the .pub file unchanged")
    return blob


def _parse_line(line: str, number: int, source: str) -> SignerEntry:
    where = f"{source} line {number}"
    fields = [f for f in _split_unquoted(line, " \t", where) if f]
    principals = _principals(fields[0], where)
    # OpenSSH tells options from a key by trying to parse a key; we look at the shape of the fields.
    has_options = len(fields) > 2 and fields[1] not in _KEY_TYPES and (
        fields[2] in _KEY_TYPES or "=" in fields[1] or fields[1].lower() == "cert-authority")
    options = _options(fields[1], where) if has_options else {}
    rest = fields[2:] if has_options else fields[1:]
    if len(rest) < 2 or rest[0] not in _KEY_TYPES:
        found = rest[0][:40] if rest else "nothing"
        raise AllowedSignersError(
            f"{where}: expected a supported key type ({', '.join(_KEY_TYPES)}), found {found!r}",
            fix="write `principal [options] keytype base64-key`, copying the .pub file")
    try:
        blob = key_blob(f"{rest[0]} {rest[1]}")
    except SignatureError as exc:
        raise AllowedSignersError(f"{where}: {exc.message}", fix=exc.fix) from None
    # where the comment begins: after the fields read above, found in the line in their order
    at = 0
    for field in [fields[0], *([fields[1]] if has_options else []), rest[0], rest[1]]:
        at = line.index(field, at) + len(field)
    _refuse_hidden_characters(line, at, number, source)
    return SignerEntry(number, principals, blob, comment=" ".join(rest[2:]), **options)


def _split_unquoted(text: str, separators: str, where: str) -> list[str]:
    """Split on ``separators`` outside double quotes (option values may quote spaces and commas)."""
    current: list[str]
    parts, current, quoted = [], [], False
    for ch in text:
        quoted = not quoted if ch == '"' else quoted
        if ch in separators and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if quoted:
        raise AllowedSignersError(f"{where}: unbalanced double quote", fix="close every quoted value")
    return [*parts, "".join(current)]


def _principals(field: str, where: str) -> tuple[str, ...]:
    field = field[1:-1] if len(field) > 1 and field[0] == field[-1] == '"' else field
    names = []
    for raw in field.split(","):
        if any(c in raw for c in "*?!"):
            raise AllowedSignersError(f"{where}: principal {raw!r} is a pattern",
                                      fix="list each approver by name: an approval must name one person")
        try:
            names.append(canonical_principal(raw, f"{where}: principal"))
        except PrincipalError as exc:
            raise AllowedSignersError(exc.message, fix=exc.fix) from None
    return tuple(names)


def _options(field: str, where: str) -> dict[str, Any]:
    found: dict[str, Any] = {}  # namespaces: tuple[str, ...]; valid_after, valid_before: datetime
    for option in _split_unquoted(field, ",", where):
        name, _, value = option.partition("=")
        name = name.lower()
        if name == "cert-authority":
            raise AllowedSignersError(f"{where}: cert-authority lines are not supported",
                                      fix="list each approver's own public key instead of a CA key")
        if name not in ("namespaces", "valid-after", "valid-before") or not value:
            raise AllowedSignersError(f"{where}: unknown option {option[:40]!r}",
                                      fix='use only namespaces="...", valid-after=... and valid-before=...')
        key = name.replace("-", "_")
        if key in found:
            raise AllowedSignersError(f"{where}: option {name} given twice", fix="give each option once")
        if not (len(value) > 1 and value[0] == value[-1] == '"'):
            # OpenSSH skips such a line ("missing start quote"): a key it would not trust never counts here
            raise AllowedSignersError(f"{where}: {name}={value[:40]} is not quoted",
                                      fix=f'quote it, as OpenSSH requires: {name}="{value[:40]}"')
        value = value[1:-1]
        found[key] = _namespaces(value, where) if key == "namespaces" else _timestamp(value, name, where)
    after, before = found.get("valid_after"), found.get("valid_before")
    early = [n for n, t in (("valid-after", after), ("valid-before", before))
             if isinstance(t, datetime) and t < _EARLIEST]
    if early:
        # OpenSSH refuses a time at or before the epoch (read in its local time zone: any zone's
        # reading of a time before 1970-01-02 is at most it) and skips the line, reading the rest:
        # the key is no one's under it. Read as a time long past, `valid-after="19691231"` let the
        # key count here (found by an attack). Kept as a line that allows nothing rather than
        # refused, so a root pinned before this release still reads
        found["skipped"] = f"OpenSSH skips this line: its {early[0]} is before 1970-01-02"
    if isinstance(after, datetime) and isinstance(before, datetime) and before <= after:
        raise AllowedSignersError(f"{where}: valid-before is not after valid-after",
                                  fix="swap or fix the two times")
    return found


def _namespaces(value: str, where: str) -> tuple[str, ...]:
    # split on commas only, as OpenSSH does: ` backfill-plan`, space and all, is the pattern, which
    # matches no namespace, so `ssh-keygen -Y verify` (and git) refuse the key for plans; stripped
    # here, the key counted (found by an attack). Not refused outright: a file shared with git may
    # hold such a line for another namespace, and OpenSSH reads the rest of it
    names = tuple(value.split(","))
    if not all(n.strip(" \t") for n in names):
        raise AllowedSignersError(f"{where}: empty namespace in namespaces={value!r}",
                                  fix='write namespaces="backfill-plan" (comma-separated, no blanks)')
    return names


def _timestamp(value: str, name: str, where: str) -> datetime:
    match = _TIME.fullmatch(value)
    try:
        if not match:
            raise ValueError(value)
        year, month, day, hour, minute, second = (int(g) if g is not None else 0 for g in match.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise AllowedSignersError(f"{where}: {name}={value[:40]!r} is not a time",
                                  fix="write YYYYMMDD[HHMM[SS]][Z]; times are read as UTC") from None


def _allows(patterns: tuple[str, ...], namespace: str) -> bool:
    """OpenSSH's pattern list: a match of a negated `!pattern` refuses, whatever else matches (read
    as a plain pattern, `namespaces="!backfill-plan,*"` allowed the very namespace it denies: found
    by an attack). In order, as `match_pattern_list` reads it: a pattern of 1,023 characters or more
    ends the list unmatched there (the 1,100-character one after `backfill-plan` counted here)."""
    found = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if len(body) >= _OPENSSH_PATTERN_MAX:
            return False
        if _glob(body, namespace):
            if negated:
                return False
            found = True
    return found


_OPENSSH_PATTERN_MAX = 1023  # match.c: `char sub[1024]`, and a longer pattern matches nothing


def _glob(pattern: str, text: str) -> bool:
    """OpenSSH pattern matching (``*``, ``?``), used for the namespaces list as ssh-keygen does.

    Row by row over the pattern (row[j]: the pattern so far matches text[:j]), so a hostile
    ``*a*a*a...`` costs len(pattern) * len(text) steps instead of a regex's exponential backtracking.
    """
    row = [True] + [False] * len(text)
    for p in pattern:
        if p == "*":
            row = list(accumulate(row, operator.or_))
        else:
            row = [False] + [row[j] and p in ("?", text[j]) for j in range(len(text))]
    return row[-1]


_EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
