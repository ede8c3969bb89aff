"""Reading the files users hand to sqa: regular files only, bounded, text decoded with the bad byte named.

Corpus metadata, split files and predictions tables are read here (`read_text`); an export's
files and the f0 cache's entries by `read_bounded`, which also refuses a link and any file
over its limit before reading it. A FIFO, device, socket or folder is refused without a blocking
open; text that does not decode names its first bad byte and line. Each caller turns
`ReadError` into its own error type.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class ReadError(ValueError):
    """A file could not be read as the text it should be; the message names it."""


def _refuse_special(path: Path, mode: int) -> None:
    """ReadError naming `path` unless `mode` (its stat) is a regular file's."""
    if stat.S_ISDIR(mode):
        raise ReadError(f"{path}: is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise ReadError(f"{path}: not a regular file (a FIFO, device or socket); refusing to open it")


def read_bytes(path: Path) -> bytes:
    """Bytes of the file at `path`; ReadError if it is missing or not a regular file.

    A FIFO, device, socket or folder is refused without a blocking open.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        raise ReadError(f"{path}: file not found") from None
    except OSError as err:
        raise ReadError(f"{path}: cannot read ({err.strerror})") from None
    # Refused before any open: opening a FIFO blocks until a writer comes, opening a device can
    # act on it (and /dev/zero never ends), and a socket cannot be opened at all.
    _refuse_special(path, mode)
    try:
        # O_NONBLOCK and fstat: a FIFO put in its place since the stat is refused, not waited on.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise ReadError(f"{path}: cannot open ({err.strerror})") from None
    try:
        _refuse_special(path, os.fstat(fd).st_mode)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of `path` if it is a regular file (no link, FIFO or device) of at most `limit` bytes.

    ReadError otherwise, naming the file: checked on the open descriptor before reading, and at
    most `limit` + 1 bytes are read (a file that grows meanwhile is refused too).
    """
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise ReadError(f"{path}: cannot open ({err.strerror})") from None
    try:
        # Checked before wrapping the descriptor in a file object, which refuses a directory.
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReadError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise ReadError(f"{path}: {info.st_size} bytes; at most {limit} are read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as err:
        raise ReadError(f"{path}: cannot read ({err.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ReadError(f"{path}: more than {limit} bytes; at most {limit} are read")
    return data


def read_text(path: Path, encoding: str | None = None, hint: str = "") -> str:
    """Text of the file at `path`: UTF-8 (or `encoding`), a byte-order mark dropped.

    A file that does not decode is a ReadError naming it, the first bad byte and its line
    (`hint` is appended to the advice); one that is missing or not a regular file is refused as
    `read_bytes` says.
    """
    data = read_bytes(path)
    try:
        text = data.decode(encoding or "utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ReadError(
            f"{path}: not {encoding or 'UTF-8'} text (byte 0x{data[err.start]:02x} on line {line}); "
            f"save it as UTF-8{hint}"
        ) from None
    except LookupError:
        raise ReadError(f"{path}: unknown encoding {encoding!r}") from None
    return text.removeprefix("\ufeff")
