"""gradcore.book.fixtures: the data sets' real on-disk layouts, read back through gradcore.data."""

import pickle

import numpy as np
import pytest
import torch

from gradcore import data
from gradcore.book import fixtures
from gradcore.validation import GradcoreValueError


def test_cifar10_fixture_has_the_archive_layout_and_loads_both_splits(tmp_path):
    fixtures.write_cifar(tmp_path, "cifar10", per_batch=20)
    base = tmp_path / "cifar-10-batches-py"
    assert sorted(p.name for p in base.iterdir()) == sorted(
        ["batches.meta", "test_batch"] + [f"data_batch_{k}" for k in range(1, 6)])
    with open(base / "data_batch_3", "rb") as handle:
        entry = pickle.load(handle, encoding="latin1")
    # The archive's documented layout: uint8 rows of 3072 values, plus a list of labels.
    assert entry["data"].dtype == np.uint8 and entry["data"].shape == (20, 3072) and len(entry["labels"]) == 20
    test = data.load("cifar10", root=tmp_path)
    train = data.load("cifar10", root=tmp_path, split="train")
    assert test.images.shape == (20, 3, 32, 32) and train.images.shape == (100, 3, 32, 32)
    assert test.num_classes == 10 and 0 <= float(test.images.min()) and float(test.images.max()) <= 1
    assert set(train.labels.tolist()) == set(range(10))


def test_train_test_keeps_cifars_own_split_and_splits_the_rest(tmp_path, monkeypatch):
    # Federated training reads CIFAR's training batches and tests on its test file; a split of
    # load("cifar10") alone would train on the test file (CENSOR Sec. V-C trains on the training set).
    monkeypatch.setenv("GRADCORE_DATA", str(tmp_path))
    fixtures.write_cifar(tmp_path, "cifar10", per_batch=6)
    train, test = data.train_test("cifar10")
    assert len(train) == 30 and len(test) == 6
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "rb") as handle:
        rows = pickle.load(handle, encoding="latin1")["data"]
    np.testing.assert_array_equal(np.round(test.images.numpy() * 255).astype(np.uint8).reshape(6, -1), rows)
    digits = data.load("digits")
    train, test = data.train_test("digits", test_fraction=0.25, seed=3)
    same_train, same_test = data.split(digits, 0.25, seed=3)
    assert torch.equal(train.images, same_train.images) and torch.equal(test.labels, same_test.labels)
    assert len(train) + len(test) == len(digits) and len(test) == round(0.25 * len(digits))


def test_cifar100_fixture_loads_with_fine_labels(tmp_path):
    fixtures.write_cifar(tmp_path, "cifar100", per_batch=30)
    dataset = data.load("cifar100", root=tmp_path)
    assert dataset.images.shape == (30, 3, 32, 32) and len(dataset.classes) == 100
    assert dataset.labels.max() < 100


def test_imagefolder_fixture_loads_as_an_imagenet_tree(tmp_path):
    fixtures.write_imagefolder(tmp_path, classes=3, per_class=2, size=40)
    dataset = data.load("imagefolder", root=str(tmp_path), size=24)
    assert dataset.images.shape == (6, 3, 24, 24) and dataset.classes == ["class0", "class1", "class2"]
    assert dataset.labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert dataset.images.dtype == torch.float32


def test_fixture_pixels_round_trip_through_the_loader(tmp_path):
    fixtures.write_cifar(tmp_path, "cifar10", per_batch=4)
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "rb") as handle:
        rows = pickle.load(handle)["data"]
    loaded = data.load("cifar10", root=tmp_path).images
    np.testing.assert_array_equal(np.round(loaded.numpy() * 255).astype(np.uint8).reshape(4, -1), rows)


def test_unknown_fixture_name_is_refused(tmp_path):
    with pytest.raises(GradcoreValueError, match="cifar10, cifar100"):
        fixtures.write_cifar(tmp_path, "svhn")


def test_missing_data_set_names_where_to_put_it_and_never_substitutes(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADCORE_DATA", str(tmp_path))
    fixtures.write_cifar(tmp_path, "cifar100", per_batch=2)
    # CIFAR-100 present, CIFAR-10 absent: the error names the folder, no other data set stands in.
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        data.load("cifar10")
    with pytest.raises(FileNotFoundError, match="image folder"):
        data.load("imagefolder", root=str(tmp_path / "nowhere"))
