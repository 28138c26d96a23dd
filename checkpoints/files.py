"""Checkpoint files that are never half-written and never silently wrong.

Atomic writes. Lightning's own save streams the bytes through fsspec, whose local "transaction"
writes a temporary file in TMPDIR and moves it over the checkpoint: across filesystems (TMPDIR on
/dev/shm or a node-local disk, checkpoints on shared storage) that move is a copy, and a process
killed during it leaves a truncated `last.ckpt`. Here the bytes go to a temporary file beside the
checkpoint, are flushed to the disk (fsync), and `os.replace` swaps the name: a reader, or a
resume after a kill at any moment, finds the old file or the new one, whole.

Checksums. Beside every checkpoint `X.ckpt` lies `X.ckpt.sha256`, the SHA-256 of its bytes; a load
checks it and refuses a file whose bytes changed (a flipped bit, a truncated copy) with one line
naming the file. The two files cannot be replaced together, so while a checkpoint is replaced the
checksum file lists both the old and the new digest, and afterwards only the new one: a kill at
any moment leaves a checkpoint whose digest is listed. Checkpoints without a checksum file (from
elsewhere, or older ones) still load.

One unit. Two processes saving one path at once could interleave those steps and leave a checksum file that
describes the other's checkpoint. A save holds an exclusive `flock` on the checkpoint's directory for its three
writes, and a read (check and load) a shared one, so a reader sees a checkpoint and its checksum file from one
save, and writers take turns.

Nothing outside the run is removed. A checkpoint restores ModelCheckpoint's state: the paths of the last, best and
k-th best checkpoints, of which Lightning removes "the previous one" at its next save, recursively. A received
checkpoint may name any path there (`<dirpath>/../../notes`), and Lightning's own check compares paths without
resolving `..` or links. Here a restored path that does not resolve to a file inside the run's checkpoint directory is
dropped with one line, and the removal itself takes only a regular file inside that directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import os
import time
import zipfile
from pathlib import Path
from typing import Any, Iterator

import lightning as L
import torch
from lightning.fabric.plugins import TorchCheckpointIO

from checkpoints.errors import CheckpointError
from checkpoints.import_paths import foreign_import_paths
from checkpoints.registry import is_registered
from common.private_api import lightning_load

log = logging.getLogger(__name__)

CHECKSUM_SUFFIX = ".sha256"
TEMPORARY_MARK = ".tmp-"  # `.<name>.tmp-<pid>`: a temporary file of process <pid>


def write_atomically(path: Path, data: bytes | memoryview) -> None:
    """`path` holds `data` afterwards, or (killed on the way) what it held before: never a part."""
    temporary = path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid()}")
    try:
        temporary.unlink(missing_ok=True)  # safe: this process's own temporary name beside `path` (a link: the link only)
        # A new file, never through a link planted under the temporary's name.
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)  # atomic within one directory (POSIX rename)
    except OSError as error:  # a full disk, a read-only directory: no partial file is left, the old one stays
        temporary.unlink(missing_ok=True)  # safe: this process's own temporary, beside `path`
        raise CheckpointError(f"could not write {path} ({error.strerror or error}): free space on its disk or give a "
                              "directory the run can write to; the previous file, if any, is unchanged") from None
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself reaches the disk
    finally:
        os.close(directory)


def listed_digests(path: Path) -> list[str] | None:
    """The digests the checksum file of `path` accepts, or None without a checksum file."""
    checksum_file = path.with_name(path.name + CHECKSUM_SUFFIX)
    if not checksum_file.is_file():
        return None
    # As written here ("<digest> [<previous digest>]"), or as `sha256sum` writes it ("<DIGEST>  <name>"), any case.
    with open(checksum_file, "rb") as file:  # a few digests: the first 4 KB of a file that may be anything
        text = file.read(4096).decode(errors="replace")
    digests = [word.lower() for word in text.split()
               if len(word) == 64 and all(c in "0123456789abcdefABCDEF" for c in word)]
    if not digests:
        raise CheckpointError(f"checksum file {checksum_file} holds no SHA-256 digest (64 hexadecimal digits): restore it, "
                              f"or delete it to load {path.name} unchecked")
    return digests


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
        old = (listed_digests(path) or [])[:1] if path.exists() else []
        write_atomically(checksum_file, " ".join([digest, *old]).encode())  # both, while the checkpoint is replaced
        write_atomically(path, data)
        write_atomically(checksum_file, digest.encode())
    remove_stale_temporaries(path.parent)


# How long a read waits for another process's lock on the checkpoint's directory (a save holds it for the seconds
# its files take to write; a live run for as long as it runs, on its own run directory).
LOCK_WAIT_S = 120.0
# Directories this process already holds an exclusive flock on (its run directory, launch/runs/run_directory.py): a second
# flock there from this process would wait for itself, and the held one already keeps other writers out.
held_directories: set[Path] = set()


@contextlib.contextmanager
def directory_lock(directory: Path, exclusive: bool) -> Iterator[None]:
    """An advisory `flock` on `directory` (exclusive for a save, shared for a read), released on leaving; none where
    the directory cannot be opened (missing: the read reports the missing file)."""
    if Path(directory).resolve() in held_directories:
        yield
        return
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        if exclusive:  # a save waits as long as it takes: giving up would end the training run
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        else:  # a read gives up after LOCK_WAIT_S: a live run that owns the directory holds its lock for good
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise CheckpointError(f"{directory} has been locked by another process for {LOCK_WAIT_S:g} s (a "
                                              "run that owns the directory, or a save in progress); wait for it to "
                                              "end, or copy the checkpoint elsewhere") from None
                    time.sleep(0.05)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def remove_stale_temporaries(directory: Path) -> None:
    """Delete temporary files left in `directory` by processes killed while writing (their pid is gone)."""
    for temporary in directory.glob(f".*{TEMPORARY_MARK}*"):
        pid = temporary.name.rsplit(TEMPORARY_MARK, 1)[-1]
        if pid.isdigit() and not _process_exists(int(pid)):
            temporary.unlink(missing_ok=True)  # safe: a name in `directory` itself (a link: the link only, not its target)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def file_digest(path: Path) -> str:
    sha256 = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            sha256.update(block)
    return sha256.hexdigest()


def verify_checkpoint_file(path: str | os.PathLike) -> None:
    """Raise CheckpointError naming `path` if it is missing, empty or its bytes differ from its checksum."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory (ckpt_path expects a .ckpt file written by a run, e.g. "
                              f"{path / 'checkpoints' / 'last.ckpt'})")
    if path.exists() and not path.is_file():  # a pipe would block the read, a device never end
        raise CheckpointError(f"checkpoint {path} is not a regular file (a pipe or a device); it is not read")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist (ckpt_path expects a .ckpt file written by a run)")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty: the run that wrote it was probably killed; use another one")
    check_declared_sizes(path)
    digests = listed_digests(path)
    if digests is not None:
        digest = file_digest(path)
        if digest not in digests:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: its SHA-256 {digest[:12]}... differs from the one recorded in "
                f"{path.name}{CHECKSUM_SUFFIX} when it was written ({digests[0][:12]}...); use another checkpoint")


def check_declared_sizes(path: Path) -> None:
    """Refuse, from the zip's directory alone, a checkpoint whose entries are compressed or declare more bytes than the
    file holds: torch.save stores its entries as they are, so such a file was crafted to expand in memory."""
    if not zipfile.is_zipfile(path):  # torch's legacy format, or not a checkpoint: the load says which
        return
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # a damaged directory: the load names the file
    declared, size = sum(entry.file_size for entry in entries), path.stat().st_size
    if declared > size or any(entry.compress_type != zipfile.ZIP_STORED for entry in entries):
        raise CheckpointError(f"checkpoint {path} declares {declared} bytes of data in a {size}-byte file (compressed "
                              "entries, which torch.save never writes): it was crafted or damaged, and is not read")


def load_checkpoint_file(path: str | os.PathLike, map_location: Any = "cpu", trusted: bool = False) -> dict[str, Any]:
    """Lightning's load after `verify_checkpoint_file`; a file torch cannot read is a CheckpointError naming it.

    A checkpoint may come from anyone, and unpickling can run code: it is read with `weights_only=True`, passed
    explicitly so that no environment variable (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD) turns it off, unless the caller
    says in code that it trusts the file (`trusted`, e.g. `load_from_checkpoint(path, weights_only=False)`). Only
    local files: a URL is refused, so nothing is fetched and unpickled that nobody has looked at.
    """
    if "://" in str(path):
        raise CheckpointError(f"checkpoint {path} is a URL: checkpoints are read from local files only; download it, make "
                              "sure you trust where it came from, and give the local path")
    try:
        with directory_lock(Path(path).parent, exclusive=False):  # no save of this path in between (module docstring)
            verify_checkpoint_file(path)
            checkpoint = lightning_load(path, map_location=map_location, weights_only=not trusted)
    except CheckpointError:
        raise
    except Exception as error:  # truncated zip, pickled garbage, code planted in the pickle, not a checkpoint at all
        text = str(error).strip()
        # torch's weights_only refusal wraps the real reason in advice about weights_only that does not apply here
        text = text.rsplit("WeightsUnpickler error:", 1)[-1].strip() if "WeightsUnpickler error:" in text else text
        reason = " ".join(text.split())[:160] if text else type(error).__name__
        raise CheckpointError(f"checkpoint {path} is not a readable checkpoint ({type(error).__name__}: {reason}); it is "
                              "truncated, was not written by torch.save, or holds objects other than tensors and plain "
                              "values (which are never unpickled: they could run code)") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} holds no model state (no 'state_dict'): it is not a Lightning checkpoint")
    if not trusted:
        refuse_unregistered_classes(checkpoint, path)
    state = checkpoint["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise CheckpointError(f"checkpoint {path}: its 'state_dict' is not a mapping of parameter names to tensors")
    broken = [name for name, value in state.items() if value.is_floating_point() and not torch.isfinite(value).all()]
    if broken:  # resuming or testing from it would only propagate NaN
        raise CheckpointError(f"checkpoint {path} holds non-finite weights ({', '.join(broken[:3])}"
                              f"{', ...' if len(broken) > 3 else ''}): the run diverged before it was written; use an earlier one")
    return checkpoint


# Keys under which a checkpoint's hyperparameters name something to import: jsonargparse's `class_path` (LightningCLI
# rebuilds the model from them, nested settings included), Hydra's `_target_`, Lightning's `_class_path` and
# `_instantiator` (load_from_checkpoint imports the latter by name).
IMPORTED_KEYS = ("class_path", "_class_path", "_target_", "_instantiator")

def refuse_unregistered_classes(checkpoint: dict[str, Any], path: Any) -> None:
    """CheckpointError naming the first class path in the checkpoint's hyperparameters (at any depth: under
    `optimizer`, `prior`, ...) that is not a registered component; nothing is imported to find out."""
    def named(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
        if depth > 32:  # deeper than any real setting: a crafted file; refused as a whole
            yield where, "(nested more than 32 levels)"
        elif isinstance(value, dict):
            for key, item in value.items():
                if key in IMPORTED_KEYS:
                    yield f"{where}.{key}", item
                yield from named(item, f"{where}.{key}", depth + 1)
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                yield from named(item, f"{where}[{index}]", depth + 1)

    for section in ("hyper_parameters", "datamodule_hyper_parameters"):
        for where, name in named(checkpoint.get(section), section):
            if not is_registered(name):
                raise CheckpointError(f"checkpoint {path}: {where} names {str(name)[:120]!r}, which is not one of the "
                                      "collection's models or data modules; it is not imported (importing runs code)")
        # A setting given as a dotted string (optimizer: strangers_module.make) is imported by jsonargparse when
        # LightningCLI or load_from_checkpoint builds the model from these settings, wherever its type takes a function
        # or a class: only the collection's and Lightning's and torch's own are allowed (checkpoints/import_paths.py).
        for where, name in foreign_import_paths(checkpoint.get(section), section, skip_keys=IMPORTED_KEYS):
            raise CheckpointError(f"checkpoint {path}: {where} is {name[:120]!r}, a dotted name that is not one of the "
                                  "collection's, Lightning's or torch.optim's; it is not imported (importing runs code)")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O with atomic, checksummed writes and verified reads (local paths)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if "://" in str(path):  # object storage: its uploads are atomic already
            return super().save_checkpoint(checkpoint, path, storage_options)
        save_checkpoint_file(checkpoint, path)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        # Every read the trainer makes (resume, test/validate ckpt_path) is the safe one; only an explicit
        # `weights_only=False` given to the trainer in code trusts the file.
        checkpoint = load_checkpoint_file(path, map_location or (lambda storage, loc: storage), trusted=weights_only is False)
        if "pytorch-lightning_version" not in checkpoint:  # Lightning's migration would end in a KeyError
            raise CheckpointError(f"checkpoint {path} holds a model's weights only, not a Lightning checkpoint (no "
                                  "'pytorch-lightning_version'); the trainer cannot resume or test from it. In Python: "
                                  "model.load_state_dict(torch.load(path, weights_only=True)['state_dict'])")
        return checkpoint

    # The directories a removal may touch (the trainer's checkpoint directories, set by AtomicCheckpoints); None: any.
    removable_in: Any = None

    def remove_checkpoint(self, path: Any) -> None:
        if "://" in str(path):
            return super().remove_checkpoint(path)
        target = Path(path).resolve()
        # Without the trainer's directories (the plugin used on its own), a file named like a checkpoint only.
        directories = self.removable_in() if self.removable_in is not None else [target.parent] * target.name.endswith(".ckpt")
        if not target.is_file() or not any(lies_inside(target, directory) for directory in directories):
            # Never a directory, never through a link to elsewhere, never outside the run (module docstring).
            log.warning("not removing %s: it is not a checkpoint file inside the run's checkpoint directory", path)
            return
        target.unlink()  # safe: resolved, a regular file, inside the run's checkpoint directory (checked above)
        checksum_file = target.with_name(target.name + CHECKSUM_SUFFIX)
        if checksum_file.is_file() and not checksum_file.is_symlink():
            checksum_file.unlink()  # safe: beside the checkpoint just removed, in the same checked directory


def check_loop_state(checkpoint: dict[str, Any], trainer: L.Trainer) -> None:
    """CheckpointError naming the first entry of the checkpoint's epoch, step or fit-loop state that is not what the
    trainer's own state holds there (a dict, or a count >= 0): Lightning would fail on it with a traceback, or count
    from a negative step."""
    def mismatch(saved: Any, expected: Any, where: str) -> str | None:
        if isinstance(expected, dict):
            if not isinstance(saved, dict):
                return where
            return next((found for key, value in expected.items() if key in saved
                         for found in [mismatch(saved[key], value, f"{where}.{key}")] if found), None)
        if isinstance(expected, int) and not isinstance(expected, bool):
            return None if isinstance(saved, int) and not isinstance(saved, bool) and saved >= 0 else where
        return None

    loops = checkpoint.get("loops")
    found = (mismatch(checkpoint.get("epoch", 0), 0, "epoch") or mismatch(checkpoint.get("global_step", 0), 0, "global_step")
             or (mismatch(loops, {}, "loops") if loops is not None else None)
             or (mismatch(loops.get("fit_loop"), trainer.fit_loop.state_dict(), "loops.fit_loop")
                 if isinstance(loops, dict) and "fit_loop" in loops else None))
    if found:
        raise CheckpointError(f"checkpoint {trainer.ckpt_path}: its {found} is not what a training loop writes there (a "
                              "count >= 0, or a mapping): the file was altered; use another checkpoint")


def check_optimizer_states(trainer: L.Trainer, pl_module: L.LightningModule) -> None:
    """CheckpointError naming the first restored optimizer buffer that is not finite, or whose shape differs from its
    parameter's: resumed, either fails at the first step with a traceback, or spoils every weight."""
    names = {id(p): name for name, p in pl_module.named_parameters()}
    for optimizer in trainer.optimizers:
        for param, buffers in optimizer.state.items():
            for key, value in buffers.items() if isinstance(buffers, dict) else []:
                if not isinstance(value, torch.Tensor):
                    continue
                where = f"checkpoint {trainer.ckpt_path}: the optimizer's {key} of {names.get(id(param), 'a parameter')}"
                if value.dim() > 0 and value.shape != param.shape:
                    raise CheckpointError(f"{where} has shape {tuple(value.shape)}, the parameter {tuple(param.shape)}: "
                                          "the file was altered, or written for other settings")
                if value.is_floating_point() and not torch.isfinite(value).all():
                    raise CheckpointError(f"{where} holds NaN or inf: resuming would spoil the weights at the first step; "
                                          "use an earlier checkpoint")


def lies_inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether `path`, with `..` and links resolved, lies strictly below `directory` (also resolved)."""
    return Path(directory).resolve() in Path(path).resolve().parents


RESTORED_PATHS = ("last_model_path", "best_model_path", "kth_best_model_path")


def drop_paths_outside(state: dict[str, Any], directory: str, source: Any) -> None:
    """Remove from a ModelCheckpoint state (as a checkpoint restores it) every path that is not a file name inside
    `directory`: Lightning would remove it at the next save, or load it as "the best" (module docstring)."""
    def outside(path: Any) -> bool:
        return not isinstance(path, str) or (path != "" and not lies_inside(path, directory))

    dropped = [state[key] for key in RESTORED_PATHS if key in state and outside(state[key])]
    for key in RESTORED_PATHS:
        if key in state and outside(state[key]):
            state[key] = ""
    best = state.get("best_k_models")
    if best is not None:
        kept = {path: score for path, score in best.items() if not outside(path)} if isinstance(best, dict) else {}
        dropped += [path for path in (best if isinstance(best, dict) else [best]) if path not in kept]
        state["best_k_models"] = kept
    if dropped:
        log.warning("checkpoint %s: its ModelCheckpoint state names %s outside this run's checkpoint directory %s; "
                    "ignored (nothing there is removed or loaded)", source, repr(dropped[0])[:200], directory)


class AtomicCheckpoints(L.Callback):
    """Makes the trainer write and read checkpoints through `AtomicCheckpointIO`. Added by every model
    (`LatentVariableModel.configure_callbacks`): the guarantee holds whichever script builds the Trainer.
    A checkpoint I/O plugin the user gave is kept."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # setup runs before Lightning restores a checkpoint, so resuming reads through the plugin too.
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO):
            trainer.strategy.checkpoint_io.removable_in = lambda: [c.dirpath for c in trainer.checkpoint_callbacks
                                                                   if getattr(c, "dirpath", None)]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.ckpt_path:  # the optimizers' state is restored by now (once per fit: one host sync)
            check_optimizer_states(trainer, pl_module)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Called before the callbacks' own states are loaded: what reaches ModelCheckpoint names only its directory.
        from lightning.pytorch.callbacks import ModelCheckpoint

        check_loop_state(checkpoint, trainer)
        states = checkpoint.get("callbacks")
        for callback in trainer.checkpoint_callbacks:
            state = states.get(callback.state_key) if isinstance(states, dict) else None
            if isinstance(callback, ModelCheckpoint) and isinstance(state, dict) and callback.dirpath:
                drop_paths_outside(state, callback.dirpath, trainer.ckpt_path)
