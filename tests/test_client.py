"""gradcore.client: what a client shares, its gradient or FedAvg update after its defense.

Outside references: the plain batch gradient and local update of :mod:`gradcore.gradients`
and each defense applied by hand with :func:`gradcore.defenses.defend`.
"""

from __future__ import annotations

import pytest
import torch

from gradcore import client, defenses, gradients


def sample(shape=(1, 8, 8), batch=3, num_classes=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.rand((batch, *shape), generator=generator, dtype=torch.float64)
    labels = torch.randint(0, num_classes, (batch,), generator=generator)
    return inputs, labels


def test_shared_gradient_without_defense_is_the_detached_batch_gradient(make_mlp):
    model = make_mlp()
    inputs, labels = sample(batch=2, num_classes=10)
    shared = client.shared_gradient(model, inputs, labels)
    batch = gradients.batch_gradient(model, inputs, labels)
    assert isinstance(shared, tuple)
    for s, b in zip(shared, batch):
        assert not s.requires_grad
        assert torch.equal(s, b)


def test_shared_gradient_applies_the_named_defense(make_mlp):
    model = make_mlp()
    inputs, labels = sample(batch=2, num_classes=10)
    raw = gradients.batch_gradient(model, inputs, labels)
    raw_norm = gradients.norm(raw).item()

    clipped = client.shared_gradient(model, inputs, labels, defense="clip", bound=raw_norm / 10)
    assert gradients.norm(clipped).item() == pytest.approx(raw_norm / 10, rel=1e-9)

    noisy = client.shared_gradient(model, inputs, labels, defense="noise", seed=7, sigma=0.01)
    expected = defenses.defend(raw, "noise", seed=7, sigma=0.01)
    assert all(torch.equal(n, e) for n, e in zip(noisy, expected))
    again = client.shared_gradient(model, inputs, labels, defense="noise", seed=7, sigma=0.01)
    other = client.shared_gradient(model, inputs, labels, defense="noise", seed=8, sigma=0.01)
    assert all(torch.equal(n, a) for n, a in zip(noisy, again))
    assert not all(torch.equal(n, o) for n, o in zip(noisy, other))

    with pytest.raises(KeyError, match="known defenses"):
        client.shared_gradient(model, inputs, labels, defense="precode")


def test_a_defense_option_is_checked_before_the_gradient_is_computed(make_mlp, monkeypatch):
    model = make_mlp()
    inputs, labels = sample(batch=2)
    monkeypatch.setattr(gradients, "batch_gradient", lambda *args, **kwargs: pytest.fail("computed before the check"))
    with pytest.raises(TypeError, match=r"sigma \(option of defense 'noise'\) must be a finite number >= 0; got '0.1'"):
        client.shared_gradient(model, inputs, labels, defense="noise", sigma="0.1")



def test_share_sends_the_local_update_defended_with_the_clients_context(make_mlp):
    model = make_mlp()
    inputs, labels = sample(batch=4, num_classes=10)
    local = {"lr": 0.1, "epochs": 2, "batch_size": 2}
    update = gradients.local_update(model, inputs, labels, **local)
    assert all(torch.equal(s, u) for s, u in zip(client.share(model, inputs, labels, local=local), update))
    context = defenses.context(model, inputs, labels)
    expected = defenses.defend(update, "censor", seed=3, context=context, trials=4)
    shared = client.share(model, inputs, labels, defense="censor", seed=3, local=local, trials=4)
    assert all(torch.equal(s, e) for s, e in zip(shared, expected))
    plain = client.share(model, inputs, labels, defense="noise", seed=5, sigma=0.1)
    assert all(torch.equal(s, p) for s, p in zip(plain, client.shared_gradient(model, inputs, labels, "cross_entropy",
                                                                                "noise", 5, sigma=0.1)))
