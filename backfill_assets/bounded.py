"""Reading a file a user names: only a regular file, never more than it could sensibly hold; and
writing one whole or not at all.

`/dev/zero` is a file too, and opening a named pipe (FIFO) for reading blocks until someone writes
to it: the file is opened without blocking and checked with fstat before a byte is read.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
from pathlib import Path

from backfill_assets.errors import BackfillError, UsageError

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


class NotRegularFile(Exception):
    """The path names something other than a regular file (`kind` says what)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(kind)


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: str | Path, limit: int) -> bytes:
    """Up to `limit + 1` bytes of a regular file (so the caller sees that it is too large);
    NotRegularFile for a pipe, device, socket or directory; OSError is the caller's."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(kind_of(mode))
        return handle.read(limit + 1)


def open_regular(path: str | Path, flags: int, mode: int = 0o600) -> int:
    """A descriptor of `path` opened with `flags` (created with `mode` under O_CREAT), only when it is
    a regular file: NotRegularFile otherwise; OSError is the caller's. Opened without blocking, as
    opening a FIFO blocks until its other end is opened too (for writing: ENXIO, said as a pipe)."""
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise NotRegularFile(kind_of(os.stat(path).st_mode)) from None
        raise
    file_mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(file_mode):
        os.close(fd)
        raise NotRegularFile(kind_of(file_mode))
    return fd


def refuse_non_regular(path: str | Path, what: str, fix: str, error: type[BackfillError] = UsageError) -> None:
    """For a file about to be written or loaded by another library: one line when it exists and is
    not a regular file (opening a FIFO for writing blocks too)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing: the caller creates it or says so
    if not stat.S_ISREG(mode):
        raise error(f"{what} {path} is {kind_of(mode)}, not a regular file", fix=fix)


NO_SUCH_HOME_FIX = "spell the path out, or its `~user` as an account of this machine"


def expanded(raw: str, what: str, fix: str = NO_SUCH_HOME_FIX) -> Path:
    """`raw` with a leading `~` or `~user` expanded; a user with no home (`~alcie/.ssh/...`, a
    mistyped name) is one line, not Python's RuntimeError (found by an attack)."""
    try:
        return Path(raw).expanduser()
    except RuntimeError:
        raise UsageError(f"{what} {raw}: {raw.split('/', 1)[0]} names no user's home folder", fix=fix) from None


def read_bounded(path: str | Path, limit: int, what: str, fix: str,
                 error: type[BackfillError] = UsageError) -> bytes:
    """The file's bytes, or a one-line error (`error`, UsageError by default) when it is not a
    regular file or passes `limit`; OSError is the caller's."""
    try:
        data = read_regular(path, limit)
    except NotRegularFile as exc:
        raise error(f"{what} {path} is {exc.kind}, not a regular file", fix=fix) from None
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {limit:,} bytes", fix=fix)
    return data


def replace_file(path: Path, text: str) -> None:
    """`path` holds `text` afterwards, or what it held before: written beside it, flushed to disk,
    then renamed over it (a kill or a full disk mid-write never leaves half a file), with the mode
    of the file it replaces (a plan file others read came out 0600, mkstemp's: found by an attack)."""
    kept = _mode_of(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if kept is not None:
                os.fchmod(handle.fileno(), kept)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create_file(path: Path, text: str) -> None:
    """`path` made to hold `text`, whole or not at all, never over anything there (a dangling link
    too): written beside it (with the mode the umask gives a new file), flushed, then linked in
    place; FileExistsError when something is there."""
    tmp = path.parent / f"{_temporary_prefix(path)}{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _temporary_prefix(path: Path) -> str:
    """The start of the name of a file written beside `path`: never longer than a file name may be
    (a legal 240-letter name, with the prefix and suffix added, was "File name too long": its
    approval never reached the plan file; found by an attack)."""
    return f".{path.name[:48]}."  # 48 characters: at most 192 bytes in UTF-8


def _mode_of(path: Path) -> int | None:
    """The permission bits of the regular file at `path`, or None (none there)."""
    try:
        found = os.stat(path).st_mode
    except OSError:
        return None
    return stat.S_IMODE(found) if stat.S_ISREG(found) else None
