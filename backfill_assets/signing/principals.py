"""Canonical principals: the one spelling of a person's name that approvals and ownership compare.

Two spellings that look the same on screen must either compare equal or be refused; otherwise
"olivia" (Cyrillic o) could approve a plan owned by "olivia", or "alice" + zero-width space could
pass a "the approver is not the owner" check. So names are NFKC-normalised and casefolded (which
folds full-width and case variants onto plain ASCII), and anything still invisible or non-ASCII
afterwards is refused rather than guessed at.
"""

from __future__ import annotations

import re
import unicodedata

from backfill_assets.errors import PrincipalError

__all__ = ["PRINCIPAL_PATTERN", "canonical_principal", "same_principal"]

PRINCIPAL_PATTERN = re.compile(r"[a-z0-9](?:[a-z0-9._@+-]{0,62}[a-z0-9])?")
_FIX = "write the name in plain ASCII letters, digits and . _ @ + -"
# Longer than any valid principal even after NFKC shrinks it; bounds the work NFKC can do.
_MAX_RAW = 256
_SHOWN = 80


def canonical_principal(raw: str, what: str = "principal") -> str:
    """Return the canonical form of ``raw`` or raise PrincipalError saying what is wrong with it."""
    if not isinstance(raw, str):
        raise PrincipalError(f"{what} {raw!r} is not a string ({type(raw).__name__})", fix=_FIX)
    if len(raw) > _MAX_RAW:
        raise PrincipalError(f"{what} {_show(raw)} is {len(raw)} characters long", fix=_FIX)
    name = unicodedata.normalize("NFKC", raw).casefold().strip()
    # casefold can leave text that is no longer NFKC (rare ligatures); normalise once more.
    name = unicodedata.normalize("NFKC", name)
    if not name:
        raise PrincipalError(f"{what} {_show(raw)} is empty", fix=_FIX)
    _refuse_bad_characters(name, raw, what)
    if not PRINCIPAL_PATTERN.fullmatch(name):
        raise PrincipalError(
            f"{what} {_show(raw)} is not a principal (1-64 characters from a-z 0-9 . _ @ + -, "
            "starting and ending with a letter or digit)",
            fix=_FIX,
        )
    return name


def same_principal(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name the same person; PrincipalError if either is not a principal."""
    return canonical_principal(a) == canonical_principal(b)


def _refuse_bad_characters(name: str, raw: str, what: str) -> None:
    # Checked in order of how surprising the character is to the person who typed it; the hidden
    # ones as typed (NFKC turns a no-break space into a space, which was named instead), the rest
    # as normalised (a full-width letter is its ASCII letter)
    for ch in [*raw.strip(), *name]:
        category = unicodedata.category(ch)
        if category == "Cf":
            problem = f"an invisible format character {_codepoint(ch)}"
        elif ch.isspace():
            problem = f"whitespace {_codepoint(ch)} inside it"
        elif category in ("Cc", "Cs", "Co", "Cn"):
            problem = f"a control or unassigned character {_codepoint(ch)}"
        elif not ch.isascii() and ch in name:
            problem = f"a non-ASCII character {_codepoint(ch)}"
        else:
            continue
        raise PrincipalError(f"{what} {_show(raw)} contains {problem}", fix=_FIX)


def _codepoint(ch: str) -> str:
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed')})"


def _show(raw: str) -> str:
    """Quote ``raw`` for a one-line message, every non-printable-ASCII character as a \\u escape."""
    clipped = raw if len(raw) <= _SHOWN else raw[:_SHOWN]
    out = []
    for ch in clipped:
        code = ord(ch)
        if ch in "'\\":
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "'" + "".join(out) + ("'..." if clipped is not raw else "'")
