"""Shared in-memory image DataModule.

Each split is one contiguous (N, C, H, W) uint8 tensor, so a batch is one fancy-indexing op plus a vectorised
binarisation, without the per-image PIL/ToTensor round trip of the torchvision datasets
(benchmarks/speed/datamodule_speed.py). Every batch is (x, index), `index` the example's position in its split: JSA's
per-example cache is keyed by it, so it is the dataset index the sampler drew, never a batch-local position.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import os
import shutil
from pathlib import Path
from typing import ClassVar, Iterator

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from common.private_api import record_hyperparameter
from common.registry import register
from common.signatures import SavesItsSettings, own_arguments
from configs.settings import Binarize, DataSettings, suited_likelihood

from .resumable import ResumableDataLoader, ResumableSampler

Batch = tuple[Tensor, Tensor]


class DataError(Exception):
    """The user's data is wrong or missing: said in one line (train.py prints it without a traceback)."""


class DataNotFoundError(DataError, FileNotFoundError):
    """The dataset files are not on disk and could not be downloaded."""


class DataCorruptError(DataError, ValueError):
    """A dataset file is on disk but its contents are wrong (truncated, swapped, another format, altered)."""


class InMemoryImageDataset(Dataset[Batch]):
    """A split held as one uint8 tensor; yields ``(x, index)`` with x in [0, 1].

    ``__getitems__`` builds a whole batch at once (the DataLoader must use :func:`collate_prebatched`). Binarisation:
    ``dynamic`` draws ``bernoulli(x)``, ``static`` thresholds at 0.5, ``none`` keeps grey values. With ``seed``, a
    pixel's dynamic draw depends on (seed, epoch, image index, pixel) alone (`pixel_uniforms`): alike in any batch,
    batch size or rank, so a resumed run sees the same batches; ``fixed_draw`` (val, test): alike in every epoch."""

    def __init__(self, images: Tensor, binarize: Binarize = "none", seed: int | None = None, fixed_draw: bool = False) -> None:
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ValueError(f"expected a uint8 (N, C, H, W) tensor, got {images.dtype} {tuple(images.shape)}")
        self.images = images.contiguous()
        self.binarize = binarize
        self.seed = seed
        self.fixed_draw = fixed_draw
        self.epoch = 0  # set by ResumableSampler.set_epoch (training split)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int) -> Batch:
        x, index = self.__getitems__([i])
        return x[0], index[0]

    def __getitems__(self, indices: list[int]) -> Batch:
        index = torch.as_tensor(indices, dtype=torch.int64)
        x = self.images[index].float().div_(255)
        if self.binarize == "dynamic" and self.seed is None:
            x = torch.bernoulli(x)
        elif self.binarize == "dynamic":
            epoch = 0 if self.fixed_draw else self.epoch
            x = (pixel_uniforms(index, x.shape[1:], self.seed, epoch) < x).float()
        elif self.binarize == "static":
            x = (x > 0.5).float()
        return x, index


_MASK32 = 0xFFFFFFFF


def _mul32(h: Tensor, constant: int) -> Tensor:
    """(h * constant) mod 2^32 for h < 2^32, in 16-bit halves so that no int64 product overflows."""
    low, high = constant & 0xFFFF, constant >> 16
    return (h * low + (((h * high) & 0xFFFF) << 16)) & _MASK32


def pixel_uniforms(index: Tensor, image_shape: torch.Size, seed: int, epoch: int = 0) -> Tensor:
    """Uniforms in [0, 1), (B, *image_shape), each a function of (seed, epoch, index[b], pixel) alone.

    A counter-based generator: each pixel's counter goes through a 32-bit integer hash (the "lowbias32"
    mixer of C. Wellons' hash-prospector), computed on int64 tensors where only the low 32 bits are kept.
    """
    num_pixels = math.prod(image_shape)
    key = (seed * 0x9E3779B9 + epoch * 0x85EBCA6B) & _MASK32
    h = ((index.unsqueeze(1) * num_pixels + torch.arange(num_pixels)) ^ key) & _MASK32
    h = h ^ (h >> 16)
    h = _mul32(h, 0x7FEB352D)
    h = h ^ (h >> 15)
    h = _mul32(h, 0x846CA68B)
    h = h ^ (h >> 16)
    return (h.double() / 2.0**32).float().clamp_max(1 - 2**-24).view(-1, *image_shape)


def collate_prebatched(batch: Batch) -> Batch:
    """Pass through a batch that ``InMemoryImageDataset.__getitems__`` already built."""
    return batch


class ImageDataModule(SavesItsSettings, L.LightningDataModule):
    """Base class: train/val split of the training file, fast in-memory loaders.

    Subclasses set ``image_shape``, ``train_file_size``, ``test_file_size`` and implement :meth:`_files`, :meth:`_read`
    (as checked uint8 ``(N, C, H, W)``) and :meth:`_download`. Bad data is one line: :class:`DataNotFoundError`
    (missing), :class:`DataCorruptError` (wrong contents; never replaced by a download), :class:`DataError`
    (unreadable). Validation is the last ``val_size`` positions of a permutation seeded by ``split_seed``, so the split
    is identical on every run and rank; ``binarize`` applies to all three splits."""

    def __init_subclass__(cls, abstract: bool = False, **kwargs: object) -> None:
        """A data module of datamodules/ registers itself when defined (`--data=NAME`, `data_defaults/NAME`, nameable
        by a checkpoint: common/registry.py); not an abstract base (`abstract=True`) nor one defined elsewhere. One
        without a `config_name` of its own (one's own FlippedMNIST) names its runs by its class (vae-flippedmnist-...),
        not by the class it extends, as a model of one's own does."""
        super().__init_subclass__(**kwargs)
        if not abstract and cls.__module__.startswith("datamodules."):
            register("data", cls)
        if "config_name" not in vars(cls):
            cls.config_name = cls.__name__.lower()

    image_shape: ClassVar[tuple[int, int, int]]
    train_file_size: ClassVar[int]
    test_file_size: ClassVar[int]

    def __init__(self, settings: DataSettings) -> None:
        """`settings`: the data module's, checked (configs/settings.py's DataSettings); here what needs the data set's
        sizes: a batch larger than its split is refused, as it is surely a mistake (one step per epoch)."""
        super().__init__()
        self.settings = settings
        declared = dataclasses.asdict(settings)  # and what a subclass of one's own adds (InvertedMNIST(invert, **settings))
        self.save_settings({**declared, **own_arguments(self, inspect.currentframe().f_back, declared)})
        data_dir, batch_size, val_size, eval_batch_size = settings.data_dir, settings.batch_size, settings.val_size, settings.eval_batch_size
        if not val_size < self.train_file_size:
            raise ValueError(f"val_size must be in [0, {self.train_file_size}), got {val_size}")
        n_train = self.train_file_size - val_size
        if batch_size > n_train:
            raise ValueError(f"batch_size={batch_size} is larger than the training split ({n_train} images with "
                             f"val_size={val_size}): use at most {n_train}")
        n_eval = max(val_size, self.test_file_size)
        if eval_batch_size is not None and eval_batch_size > n_eval:
            raise ValueError(f"eval_batch_size={eval_batch_size} is larger than both the val split ({val_size} images) and "
                             f"the test split ({self.test_file_size}): use at most {n_eval}")
        self.data_dir = Path(data_dir or os.environ.get("DATA_DIR") or "./data").expanduser().resolve()
        record_hyperparameter(self, "data_dir", str(self.data_dir))  # what the run read (hparams.yaml), not None ("DATA_DIR")
        if self.data_dir.exists() and not self.data_dir.is_dir():
            source = "data_dir" if data_dir else "the environment's DATA_DIR" if os.environ.get("DATA_DIR") else "data_dir"
            raise ValueError(f"{source}={self.data_dir} is a file; expected the folder that holds (or will hold) the "
                             "data set's folder in torchvision's layout")
        self.batch_size, self.num_workers, self.binarize = batch_size, settings.num_workers, settings.binarize
        self.val_size, self.split_seed, self.seed = val_size, settings.split_seed, settings.seed
        self.download, self.pin_memory = settings.download, settings.pin_memory
        self.eval_batch_size = batch_size if eval_batch_size is None else eval_batch_size
        self.train_sampler: ResumableSampler | None = None
        self.train_set: InMemoryImageDataset | None = None
        self.val_set: InMemoryImageDataset | None = None
        self.test_set: InMemoryImageDataset | None = None

    #: The data set's name in run names (configs/data/<name>.yaml for the collection's own).
    config_name: ClassVar[str] = "data"
    #: The backbone that suits these images; a model whose `backbone` is left out gets it (None: the model's own).
    backbone: ClassVar[str | None] = None

    @property
    def likelihood(self) -> str:
        """The likelihood that suits these images; a model whose `likelihood` is left out gets this one."""
        return self.likelihood_for(self.binarize)

    @staticmethod
    def likelihood_for(binarize: Binarize) -> str:
        """The likelihood that suits pixels binarized as `binarize` (configs/settings.py: suited_likelihood)."""
        return suited_likelihood(binarize)

    @property
    def num_train_examples(self) -> int:
        return self.train_file_size - self.val_size

    @property
    def num_val_examples(self) -> int:
        return self.val_size

    @property
    def num_test_examples(self) -> int:
        return self.test_file_size

    def _files(self, train: bool) -> list[Path]:
        """The files the training (or test) split is read from, all of which must exist."""
        raise NotImplementedError

    def _read(self, train: bool) -> Tensor:
        """The split as uint8 (N, C, H, W) from its (present) files; DataCorruptError if their contents are wrong."""
        raise NotImplementedError

    def _download(self) -> None:
        """Fetch the missing files; a file already there is left as it is (if corrupt, the user must see it)."""
        raise NotImplementedError

    def _ensure_files(self, train: bool, download: bool) -> None:
        """DataNotFoundError unless the split's files are all there, after downloading the missing ones if allowed."""
        # exists(), not is_file(): a folder or an unreadable file of that name is reported by _load, not as missing
        try:
            missing = [f for f in self._files(train) if not f.exists()]
        except PermissionError as err:  # a folder on the way this user may not look into (mode 000, say)
            raise DataError(f"{type(self).__name__}: cannot look for {err.filename}: permission denied. Fix: make the data "
                            f"folder {self.data_dir} (DATA_DIR, or data.data_dir) and the folders below it readable and "
                            "searchable by this user (chmod u+rx), or point DATA_DIR at one that is.") from None
        if missing and download:
            with self._undone_if_refused():
                try:
                    self._download()
                except (OSError, RuntimeError) as err:  # URLError, a bad md5 of the archive, a full disk
                    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                    raise self._not_found(f"the download failed ({reason[:120]})") from None  # no chained traceback
                missing = [f for f in missing if not f.exists()]
                if missing:
                    raise self._not_found("the download did not provide them")
        elif missing:
            attempt = "setup() does not download, prepare_data() does" if self.download else "download=False"
            raise self._not_found(f"no download was attempted ({attempt})")

    def _download_places(self) -> list[Path]:
        """Where :meth:`_download` writes: the folders of the split files, and a subclass's archive if it has one."""
        return sorted({f.parent for f in self._files(True) + self._files(False)})

    @contextlib.contextmanager
    def _undone_if_refused(self) -> Iterator[None]:
        """A download that fails (no network, as in CI; a DATA_DIR one level off, say .../MNIST) refuses the run, which
        then leaves the user's data folder as it was: what the download made goes again, i.e. the outermost missing
        folder (or file) of each place it writes (MNIST/, or MNIST/MNIST/ with its raw/), and what it added to a
        dataset folder that was there already (a partial download)."""
        places = self._download_places()
        made = {[p for p in (place, *place.parents) if not p.exists()][-1] for place in places if not place.exists()}
        listed = {place: set(os.listdir(place)) for place in places if place.is_dir()}
        try:
            yield
        except BaseException:
            for path in [*made, *(place / name for place, names in listed.items() for name in set(os.listdir(place)) - names)]:
                # safe: each path is one this failed download made in the data folder (absent, or not listed, before it)
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)  # safe: made by this failed download (see above)
                else:
                    path.unlink(missing_ok=True)  # safe: made by this failed download (a link: the link itself)
            raise

    def _load(self, train: bool) -> Tensor:
        """:meth:`_read` of files known to be there, any error said in one line."""
        self._ensure_files(train, download=False)
        try:
            images = self._read(train)
        except OSError as err:  # present but unreadable (permissions, a folder of that name): not "not found"
            raise DataError(f"{type(self).__name__}: cannot read {err.filename or self.data_dir}: {err.strerror or err}. "
                            "Fix: make it a readable file, or delete it so that it is downloaded again.") from None
        expected = (self.train_file_size if train else self.test_file_size, *self.image_shape)
        if tuple(images.shape) != expected:  # a subclass's _read checks its files; this is the last line of defence
            raise DataCorruptError(f"{type(self).__name__}: {', '.join(map(str, self._files(train)))} are corrupt: they hold "
                                   f"images of shape {tuple(images.shape)}, expected {expected}")
        return images

    def _not_found(self, attempt: str) -> DataNotFoundError:
        """A short message: where the files were looked for, which, why no download, and the fix."""
        files = self._files(True) + self._files(False)
        missing = [f for f in files if not f.exists()]  # of both splits, whichever split was asked for
        folders = {f.parent for f in files}
        expected = (f"{files[0].parent}/{{{','.join(f.name for f in files)}}}" if len(folders) == 1
                    else ", ".join(map(str, files)))
        some = len(missing) < len(files)
        which = f"; missing {', '.join(f.name for f in missing)}" if some else ""
        return DataNotFoundError(
            f"{type(self).__name__}: {'incomplete' if some else 'no'} data set in {self.data_dir}: expected {expected}"
            f"{which}; {attempt}. Fix: point DATA_DIR (or data.data_dir=/path, or --data.data_dir /path) at the "
            "directory that holds them, or run once where the network is reachable."
        )

    def prepare_data(self) -> None:
        """Make sure the files are on disk, downloading the missing ones if allowed. Their contents are checked
        by setup, which reads them (on every rank: each sees a corrupt file and stops alike)."""
        for train in (True, False):
            self._ensure_files(train, download=self.download)

    def setup(self, stage: str | None = None) -> None:
        """Load the splits ``stage`` needs (all for ``None``); never downloads."""
        if stage in (None, "fit", "validate") and self.train_set is None:
            images = self._load(train=True)
            generator = torch.Generator().manual_seed(self.split_seed)
            perm = torch.randperm(images.shape[0], generator=generator)
            n_train = self.num_train_examples
            self.train_set = InMemoryImageDataset(images[perm[:n_train]], self.binarize, seed=self.seed)
            # val and test: each image's draw is fixed by its index, so every model, epoch, batch size and
            # number of devices is evaluated on the same binary images.
            self.val_set = InMemoryImageDataset(images[perm[n_train:]], self.binarize, seed=self.split_seed, fixed_draw=True)
        if stage in (None, "test") and self.test_set is None:
            self.test_set = InMemoryImageDataset(self._load(train=False), self.binarize, seed=self.split_seed, fixed_draw=True)

    def _loader(self, dataset: InMemoryImageDataset | None, batch_size: int, shuffle: bool) -> DataLoader[Batch]:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}: call setup() before requesting dataloaders")
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate_prebatched,
        )

    def train_dataloader(self) -> DataLoader[Batch]:
        """Shuffled per epoch by (seed, epoch) and sharded per rank; resumable mid-epoch (datamodules/resumable.py)."""
        if self.train_set is None:
            raise RuntimeError(f"{type(self).__name__}: call setup() before requesting dataloaders")
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        self.train_sampler = ResumableSampler(self.train_set, self.batch_size, num_replicas=world, rank=rank, seed=self.seed)
        return ResumableDataLoader(
            self.train_set, self.train_sampler, num_workers=self.num_workers, pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0, collate_fn=collate_prebatched,
            generator=torch.Generator().manual_seed(self.seed),  # the loader's own draws leave the global RNG alone
        )

    def on_before_batch_transfer(self, batch: Batch, dataloader_idx: int) -> Batch:
        # Lightning calls this for each batch a step consumes (the loader itself runs one batch ahead),
        # so the count is the position a mid-epoch checkpoint must resume from.
        if self.train_sampler is not None and self.trainer is not None and self.trainer.training:
            self.train_sampler.batches_done += 1
        return batch

    def val_dataloader(self) -> DataLoader[Batch]:
        return self._loader(self.val_set, self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader[Batch]:
        return self._loader(self.test_set, self.eval_batch_size, shuffle=False)
