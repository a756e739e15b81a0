"""The case most attack tests observe: a sigmoid MLP's gradient of one digit."""

from __future__ import annotations

import pytest

from gradcore import client

from .helpers import digit


@pytest.fixture
def mlp_case(digits, make_mlp):
    model = make_mlp(widths=(16,), activation="sigmoid", seed=3)
    image, label = digit(digits, 7)
    return model, image, label, client.shared_gradient(model, image, label)

