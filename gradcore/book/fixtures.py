"""Small data sets in the real on-disk formats, for tests and for smoke runs of the paper profile.

The paper profiles read CIFAR-10, CIFAR-100 or an ImageNet-style folder from the reader's disk
(:mod:`gradcore.data`); none is on the CI machine and nothing may be downloaded. These writers
build the same layouts from scikit-image's bundled photographs, so that the loaders, and the
chapters' paper code paths, run exactly as they would on a user's copy:

* ``cifar-10-batches-py/``: ``data_batch_1`` ... ``data_batch_5``, ``test_batch``, ``batches.meta``
  (pickled dicts with ``data`` as uint8 rows of 3072 values, channel-major, and ``labels``);
* ``cifar-100-python/``: ``train``, ``test``, ``meta`` (``fine_labels``, ``fine_label_names``);
* ``imagefolder/<class>/<n>.png``.

The images are crops of the photographs, labelled round-robin: the formats are real, the
content is not CIFAR or ImageNet, and nothing measured on them is a result.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from .. import data
from .. import validation as check

#: Distinct crops cut per call; more images repeat them, mirrored and shifted (cutting crops is the
#: slow part).
DISTINCT = 64


def _crops(count: int, size: int, seed: int) -> np.ndarray:
    """``count`` uint8 crops (N, 3, size, size) of the bundled photographs."""
    distinct = min(count, DISTINCT)
    per_photo = -(-distinct // len(data.PHOTO_FILES))
    unique = data.photos(size=size, per_photo=per_photo, seed=seed).images.numpy()
    images = []
    for index in range(count):
        image, cycle = unique[index % len(unique)], index // len(unique)
        image = image[..., ::-1] if cycle % 2 else image
        images.append(np.roll(image, cycle // 2, axis=-1))
    return np.round(np.stack(images) * 255).astype(np.uint8)


def _pickle(path: Path, entry: dict) -> None:
    with open(path, "wb") as handle:
        pickle.dump(entry, handle)


def write_cifar(root, name: str = "cifar10", per_batch: int = 100, seed: int = 0) -> Path:
    """Write a small CIFAR-10 (``name="cifar10"``) or CIFAR-100 archive under ``root``; return
    ``root``.

    ``per_batch`` images in each file (every training batch and the test file), 32x32 RGB.
    """
    check.integer("per_batch", per_batch, low=1)
    layouts = {
        "cifar10": (
            "cifar-10-batches-py",
            [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"],
            "labels",
            "batches.meta",
            "label_names",
            10,
        ),
        "cifar100": (
            "cifar-100-python",
            ["train", "test"],
            "fine_labels",
            "meta",
            "fine_label_names",
            100,
        ),
    }
    if name not in layouts:
        raise check.GradcoreValueError(
            f"unknown CIFAR fixture {name!r}; known: {', '.join(layouts)}"
        )
    folder, files, label_key, meta, meta_key, classes = layouts[name]
    base = Path(root) / folder
    base.mkdir(parents=True, exist_ok=True)
    images = _crops(per_batch * len(files), 32, seed)
    for index, file_name in enumerate(files):
        rows = images[index * per_batch : (index + 1) * per_batch].reshape(per_batch, 3 * 32 * 32)
        labels = [(index * per_batch + k) % classes for k in range(per_batch)]
        _pickle(
            base / file_name,
            {"data": rows, label_key: labels, "batch_label": f"gradcore fixture {file_name}"},
        )
    _pickle(base / meta, {meta_key: [f"class{k}" for k in range(classes)]})
    return Path(root)


def write_imagefolder(
    root, classes: int = 3, per_class: int = 2, size: int = 64, seed: int = 0
) -> Path:
    """Write ``root/class<k>/<n>.png``, an ImageNet-style tree of photograph crops; return
    ``root``."""
    from skimage import io

    check.integer("classes", classes, low=1)
    check.integer("per_class", per_class, low=1)
    images = _crops(classes * per_class, size, seed)
    for index, image in enumerate(images):
        folder = Path(root) / f"class{index % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        io.imsave(
            folder / f"{index // classes}.png", image.transpose(1, 2, 0), check_contrast=False
        )
    return Path(root)


#: Written last by :func:`write_all`: a folder without it is incomplete and is written again.
COMPLETE = ".gradcore-fixtures-1"


def write_all(root) -> Path:
    """Every fixture under ``root`` (what ``gradcore smoke`` points ``GRADCORE_DATA`` at); kept once
    complete."""
    root = Path(root)
    if not (root / COMPLETE).exists():
        write_cifar(root, "cifar10")
        write_cifar(root, "cifar100")
        write_imagefolder(root / "imagefolder")
        (root / COMPLETE).write_text("written by gradcore.book.fixtures.write_all\n")
    return root
