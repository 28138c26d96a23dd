"""Checkpoint files that are never half-written and never silently wrong (docs/cluster.md#files-that-survive-a-kill).

* atomic writes: a temporary beside the checkpoint, fsync, `os.replace` (common/files.py), not Lightning's fsspec
  save, which moves a TMPDIR file across filesystems, a copy that a kill truncates;
* checksums: `X.ckpt.sha256` beside `X.ckpt` (both digests while it is replaced); a load refuses changed bytes, which
  torch.load does not notice in tensor data; a checkpoint without one still loads;
* one unit: a save holds an exclusive `flock` on the directory, a read (checkpoints/loader.py) a shared one."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import string
import time
import zipfile
from pathlib import Path
from typing import Any, Iterator

import torch

from checkpoints.errors import CheckpointError
from common.files import TEMPORARY_MARK, read_regular, write_file

CHECKSUM_SUFFIX = ".sha256"
# How long a read waits for another process's lock on the checkpoint's directory (a save holds it for the seconds
# its files take to write; a live run for as long as it runs, on its own run directory).
LOCK_WAIT_S = 120.0
LOCK_POLL_S = 0.005  # a read's tries at the shared lock: often enough to find the gaps between frequent saves
# Directories this process already holds an exclusive flock on (its run directory, launch/runs/run_directory.py): a second
# flock there from this process would wait for itself, and the held one already keeps other writers out.
held_directories: set[Path] = set()


def listed_digests(path: Path) -> list[str] | None:
    """The digests the checksum file of `path` accepts, or None without a checksum file: as written here
    ("<digest> [<previous digest>]") or as `sha256sum` writes it ("<DIGEST>  <name>"), any case."""
    checksum_file = path.with_name(path.name + CHECKSUM_SUFFIX)
    if not checksum_file.is_file():
        return None
    text = read_regular(checksum_file, 4096).decode(errors="replace")  # a few digests: the first 4 KB of a file that may be anything
    return [word.lower() for word in text.split() if len(word) == 64 and set(word) <= set(string.hexdigits)]


def write_atomically(path: Path, data: str | bytes | memoryview) -> None:
    """`path` holds `data` afterwards, or (killed on the way) what it held before: never a part (common/files.py)."""
    try:
        write_file(path, data)
    except OSError as error:  # a full disk, a read-only directory: no partial file is left, the old one stays
        raise CheckpointError(f"could not write {path} ({error.strerror or error}): free space on its disk or give a "
                              "directory the run can write to; the previous file, if any, is unchanged") from None


def save_checkpoint_file(checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
    """torch.save `checkpoint` to `path` atomically, with its checksum beside it (module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    data = buffer.getbuffer()
    digest = hashlib.sha256(data).hexdigest()
    checksum_file = path.with_name(path.name + CHECKSUM_SUFFIX)
    with directory_lock(path.parent, exclusive=True):
        # The replaced checkpoint's digest stays listed until it is replaced (module docstring). A checksum file of no
        # digest is replaced as it is: it let no load of the old checkpoint through, and the new one gets its own. A
        # save killed before its replace left two digests listed: the one of the file on disk is kept.
        listed = (listed_digests(path) or []) if path.exists() else []
        old = listed if len(listed) <= 1 else [digest for digest in listed if digest == file_digest(path)][:1]
        write_atomically(checksum_file, " ".join([digest, *old]))  # both, while the checkpoint is replaced
        write_atomically(path, data)
        write_atomically(checksum_file, digest)
    remove_stale_temporaries(path.parent)


@contextlib.contextmanager
def directory_lock(directory: Path, exclusive: bool) -> Iterator[None]:
    """An advisory `flock` on `directory` (exclusive for a save, shared for a read), released on leaving; none where
    the directory cannot be opened (missing: the read reports the missing file). A save waits as long as it takes
    (giving up would end the training run); a read gives up after LOCK_WAIT_S, since a live run that owns the
    directory holds its lock for good."""
    try:
        descriptor = None if Path(directory).resolve() in held_directories else os.open(directory, os.O_RDONLY)
    except OSError:
        descriptor = None
    deadline = time.monotonic() + LOCK_WAIT_S
    try:
        while descriptor is not None:
            with contextlib.suppress(BlockingIOError):  # (a read's only: a save's flock waits)
                fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else (fcntl.LOCK_SH | fcntl.LOCK_NB))
                break
            if time.monotonic() > deadline:
                raise CheckpointError(f"{directory} has been locked by another process for {LOCK_WAIT_S:g} s (a run "
                                      "that owns the directory, or a save in progress); wait for it to end, or copy the "
                                      "checkpoint elsewhere")
            time.sleep(LOCK_POLL_S)
        yield
    finally:
        if descriptor is not None:
            os.close(descriptor)  # releases the lock


def remove_stale_temporaries(directory: Path) -> None:
    """Delete temporary files left in `directory` by processes killed while writing (their pid is gone)."""
    for temporary in directory.glob(f".*{TEMPORARY_MARK}[0-9]*"):  # (digits first: never a negative pid, a group)
        try:
            os.kill(int(temporary.name.rsplit(TEMPORARY_MARK, 1)[-1]), 0)
        except ProcessLookupError:  # gone
            temporary.unlink(missing_ok=True)  # safe: a name in `directory` itself (a link: the link only, not its target)
        except (PermissionError, OverflowError, ValueError):  # another user's process; no such pid at all; not a pid
            pass


def file_digest(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def verify_checkpoint_file(path: str | os.PathLike) -> None:
    """Raise CheckpointError naming `path` if it is missing, empty, not a regular file, declares more than it holds
    (compressed entries), or its bytes differ from its checksum."""
    path = Path(path)
    if not path.is_file():  # a pipe would block the read, a device never end
        raise CheckpointError(f"checkpoint {path} " + (
            f"is a directory (ckpt_path expects a .ckpt file written by a run, e.g. {path / 'checkpoints' / 'last.ckpt'})"
            if path.is_dir() else "is not a regular file (a pipe or a device); it is not read" if path.exists()
            else "does not exist (ckpt_path expects a .ckpt file written by a run)"))
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty: the run that wrote it was probably killed; use another one")
    # Its zip directory alone: torch.save stores entries as they are, so entries that are compressed or declare more
    # bytes than the file holds were crafted to expand in memory. A file that is not a zip (torch's legacy format, or no
    # checkpoint) or whose directory is damaged is left to the load.
    entries: list[zipfile.ZipInfo] = []
    with contextlib.suppress(zipfile.BadZipFile, OSError, ValueError), zipfile.ZipFile(path) as archive:
        entries = archive.infolist()
    declared, size = sum(entry.file_size for entry in entries), path.stat().st_size
    if declared > size or any(entry.compress_type != zipfile.ZIP_STORED for entry in entries):
        raise CheckpointError(f"checkpoint {path} declares {declared} bytes of data in a {size}-byte file (compressed "
                              "entries, which torch.save never writes): it was crafted or damaged, and is not read")
    digests = listed_digests(path)
    if digests == []:
        raise CheckpointError(f"checksum file {path}{CHECKSUM_SUFFIX} holds no SHA-256 digest (64 hexadecimal digits): "
                              f"restore it, or delete it to load {path.name} unchecked")
    if digests and (digest := file_digest(path)) not in digests:
        raise CheckpointError(f"checkpoint {path} is corrupt: its SHA-256 {digest[:12]}... differs from the one recorded "
                              f"in {path.name}{CHECKSUM_SUFFIX} when it was written ({digests[0][:12]}...); use another checkpoint")

