"""The one way the collection writes a file, and reads or places one in a run or a received folder
(docs/cluster.md#files-that-survive-a-kill); refusals are one line naming the path.

Writing: an exclusive temporary beside the target, fsync, `os.replace`, so a reader or a killed process finds the old
file or the new one, whole, and nothing is written through a link, FIFO or device (`appending` copies the old file in
first). Reading: `open_regular` refuses anything but a regular file. Placing: `resolved_inside` refuses a folder when a
link on the way leads outside its root (the root itself is the user's to choose)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Iterator

TEMPORARY_MARK = ".tmp-"  # `.<name>.tmp-<pid>`: a temporary file of process <pid>


class NotARegularFile(OSError):
    """A file to be read is a FIFO, a folder, a device or a socket: it is not opened (one line naming it)."""


class LeadsOutside(OSError):
    """A folder to be written in leads, through a symbolic link, outside the root it is placed in (one line naming it)."""


def resolved_inside(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """`path` with its links and `..` resolved, when that is `root` (resolved too) or lies below it; else LeadsOutside
    naming `path`, where it leads and `root`. A missing part resolves as it is named (nothing is made here)."""
    inside, resolved = Path(root).resolve(), Path(path).resolve()
    if resolved != inside and inside not in resolved.parents:
        raise LeadsOutside(f"{path} leads through a symbolic link to {resolved}, outside {root}: nothing is written "
                           "through a link; remove the link, or give another folder")
    return resolved


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A new binary file that, when the block ends without an error, replaces `path` whole (module docstring); on an
    error it is removed and `path` is as it was. A library that writes only to a path it is given writes to the
    file's `name` (the new file, made by this process a moment ago)."""
    with _temporary_beside(Path(path)) as (temporary, file):
        yield file
        _rename(temporary, file, Path(path))


def write_file(path: str | os.PathLike, data: str | bytes | memoryview) -> None:
    """`path` holds `data` (text as UTF-8) afterwards, or, if the process dies on the way, what it held before."""
    with replacing(path) as file:
        file.write(data.encode() if isinstance(data, str) else data)


@contextlib.contextmanager
def appending(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file that is `path` from the start of the block, holding what `path` held (when a regular file), open
    at its end for what the block writes (a subprocess's output too)."""
    path = Path(path)
    old = read_regular(path) if path.is_file() and not path.is_symlink() else b""
    with _temporary_beside(path) as (temporary, file):
        file.write(old)
        _rename(temporary, file, path)
        yield file


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[tuple[Path, BinaryIO]]:
    """(name, file) of a new file beside `path`, removed if the block fails before renaming it."""
    temporary = path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid()}")
    temporary.unlink(missing_ok=True)  # safe: this process's own temporary name beside `path` (a link: the link only)
    try:
        with create_new(temporary) as file:
            yield temporary, file
    except BaseException:
        temporary.unlink(missing_ok=True)  # safe: this process's own temporary, beside `path` (gone once renamed)
        raise


def _rename(temporary: Path, file: BinaryIO, path: Path) -> None:
    """Flush `file` to the disk and rename it from `temporary` over `path`, the rename reaching the disk too."""
    file.flush()
    os.fsync(file.fileno())
    try:
        os.replace(temporary, path)  # atomic within one directory (POSIX rename)
    except IsADirectoryError:
        raise IsADirectoryError(errno.EISDIR, "a folder lies where this file is written, so it is not written", str(path)) from None
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def create_new(path: str | os.PathLike) -> BinaryIO:
    """A new file at `path`, open for writing in binary; FileExistsError if anything is there (a link included), so
    that nothing is written into an existing file or through a link: a temporary, or a log of this process's own."""
    return open(path, "xb", opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW, 0o644))


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """`path` open for reading in binary, or NotARegularFile naming it when it is not a regular file (a link to one is
    followed); never waits on a FIFO. A missing file raises FileNotFoundError, as `open` does."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a device")
        raise NotARegularFile(f"{path} is {kind}, not a regular file: it is not read")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def read_regular(path: str | os.PathLike, limit: int = -1) -> bytes:
    """The bytes of the regular file `path` (at most `limit`), as `open_regular` opens it."""
    with open_regular(path) as file:
        return file.read(limit)


def check_regular(path: str | os.PathLike) -> None:
    """NotARegularFile naming `path` unless it is a regular file: before a library (TensorBoard's EventAccumulator)
    opens it with a blocking read of its own."""
    open_regular(path).close()
