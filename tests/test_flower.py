"""gradcore.flower: the curious server on a real Flower deployment, and what it needs without Flower.

Outside references: gradcore's own client (:func:`gradcore.client.shared_gradient`,
:func:`gradcore.client.share`) for what a Flower client sends; ``/proc/net/tcp``'s documented
hex format for the socket reader; and a real deployment (SuperLink, two SuperNodes, ``flwr
run``) whose captures must equal the in-process computation, leave no process behind and
touch nothing but loopback.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil
import pytest
import torch

from gradcore import client, data, flower
from gradcore.errors import GradcoreValueError
from gradcore.flower import deployment, protocol

MODEL = "mlp(widths=(16,))"


def small_setup(tmp_path, partitions=((0,), (1,))):
    return protocol.make_setup(MODEL, "digits", partitions, tmp_path / "captures", seed=3)


def test_make_round_refuses_what_a_client_cannot_do():
    with pytest.raises(GradcoreValueError, match="not both"):
        flower.make_round("x", {"defense": "noise", "sigma": 0.1}, dp_sgd={"noise_multiplier": 1.0,
                                                                          "max_grad_norm": 1.0, "batch_size": 1})
    with pytest.raises(GradcoreValueError, match="DP-SGD takes exactly"):
        flower.make_round("x", dp_sgd={"noise_multiplier": 1.0})
    with pytest.raises(GradcoreValueError, match="sigma"):
        flower.make_round("x", {"defense": "noise", "sigma": -1.0})
    with pytest.raises(KeyError, match="unknown defense"):
        flower.make_round("x", {"defense": "shield"})
    with pytest.raises(GradcoreValueError, match="lr"):
        flower.make_round("x", lr=0.0)


def test_make_setup_refuses_empty_clients_and_unknown_names(tmp_path):
    with pytest.raises(GradcoreValueError, match="at least one image"):
        protocol.make_setup(MODEL, "digits", [[0], []], tmp_path)
    with pytest.raises(KeyError, match="digits"):
        protocol.make_setup(MODEL, "digitz", [[0]], tmp_path)
    with pytest.raises(GradcoreValueError, match="partition-id 5"):
        setup = small_setup(tmp_path)
        protocol.partition(setup, data.load("digits"), 5)


def fake_capture(setup, dataset, round_spec, server_round=1, partition_id=0):
    """What the server would capture, computed here: the sent model and the client's new weights."""
    model = protocol.global_model(setup, dataset)
    images, labels = protocol.partition(setup, dataset, partition_id)
    update = protocol.client_update(model, images, labels, round_spec,
                                    protocol.client_seed(setup, server_round, partition_id))
    return model, protocol.Capture(server_round, partition_id, round_spec, model.state_dict(),
                                   protocol.updated_state(model, update), len(labels))


def test_a_one_step_capture_gives_back_the_defended_gradient(tmp_path):
    setup, dataset = small_setup(tmp_path), data.load("digits")
    round_spec = flower.make_round("noise", {"defense": "noise", "sigma": 0.01}, lr=0.5)
    model, capture = fake_capture(setup, dataset, round_spec)
    images, labels = protocol.partition(setup, dataset, 0)
    expected = client.shared_gradient(model, images, labels, defense="noise", sigma=0.01,
                                      seed=protocol.client_seed(setup, 1, 0))
    observed = protocol.observed_gradient(model, capture)
    for a, b in zip(observed, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-5 * float(b.abs().max()) + 1e-7)


def test_a_fedavg_capture_is_an_update_not_a_gradient(tmp_path):
    setup, dataset = small_setup(tmp_path, partitions=((0, 1, 2),)), data.load("digits")
    round_spec = flower.make_round("local", lr=0.1, local={"epochs": 2, "batch_size": 1})
    model, capture = fake_capture(setup, dataset, round_spec)
    images, labels = protocol.partition(setup, dataset, 0)
    expected = client.share(model, images, labels, local={"lr": 0.1, "epochs": 2, "batch_size": 1})
    for a, b in zip(protocol.observed_update(model, capture), expected, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    with pytest.raises(GradcoreValueError, match="observed_update"):
        protocol.observed_gradient(model, capture)


def test_captures_survive_the_disk(tmp_path):
    setup, dataset = small_setup(tmp_path), data.load("digits")
    _, capture = fake_capture(setup, dataset, flower.make_round("none"))
    protocol.save_capture(setup["captures"], capture)
    (loaded,) = protocol.load_captures(setup["captures"])
    assert loaded.round_spec == capture.round_spec and loaded.partition_id == 0
    assert all(torch.equal(loaded.returned[k], capture.returned[k]) for k in capture.returned)
    with pytest.raises(GradcoreValueError, match="no captures"):
        protocol.load_captures(tmp_path / "elsewhere")


def test_hex_addresses_read_as_proc_net_writes_them():
    assert deployment._hex_address("0100007F") == "127.0.0.1"
    assert deployment._hex_address("00000000000000000000000001000000") == "::1"
    assert deployment._hex_address("0000000000000000FFFF00000100007F") == "::ffff:127.0.0.1"
    assert deployment._hex_endpoint("0100007F:1F90") == ("127.0.0.1", 8080)


def test_socket_endpoints_see_a_listening_socket_and_judge_it():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        found = deployment.socket_endpoints(psutil.Process().pid)
        assert (("127.0.0.1", port), ("0.0.0.0", 0)) in found
    launch = deployment.Launch(0.0, 0, False, {}, 1, {(("127.0.0.1", port), ("0.0.0.0", 0))})
    assert launch.foreign_addresses == [] and launch.addresses == {"127.0.0.1"}
    # A listener on every interface, and a connection to another host, are both beyond loopback.
    wide = deployment.Launch(0.0, 0, False, {}, 1, {(("0.0.0.0", 8080), ("0.0.0.0", 0)),
                                                    (("10.0.0.5", 40000), ("93.184.216.34", 443)),
                                                    (("::1", 5000), ("::1", 6000))})
    assert wide.foreign_addresses == ["0.0.0.0:8080 -> 0.0.0.0:0", "10.0.0.5:40000 -> 93.184.216.34:443"]


def test_socket_tables_are_read_once_per_network_namespace(monkeypatch):
    """Watching a deployment reads each namespace's socket tables once per look, not once per
    process; what is found is the same as reading them afresh."""
    reads = []
    real = deployment._socket_tables
    monkeypatch.setattr(deployment, "_socket_tables", lambda pid: reads.append(pid) or real(pid))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        tables, pid = {}, psutil.Process().pid
        first = deployment.socket_endpoints(pid, tables)
        second = deployment.socket_endpoints(pid, tables)
        assert (("127.0.0.1", port), ("0.0.0.0", 0)) in first and first == second
        assert len(reads) == 1 and len(tables) == 1
        assert deployment.socket_endpoints(pid) == first and len(reads) == 2


def test_a_taken_port_is_refused_by_number():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(GradcoreValueError, match=f"port {port}"):
            deployment.check_port_free(port)


def test_flower_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(GradcoreValueError, match="pip install"):
        flower.require_flower()


def test_a_real_deployment_captures_what_gradcore_computes_and_leaves_nothing_behind(tmp_path):
    """Two SuperNodes, two rounds (a defended FedSGD step, then two local FedAvg steps).

    About 80 s on two idle cores (measured); each client process spends 4.5 s importing torch and flwr.
    """
    pytest.importorskip("flwr")
    schedule = [flower.make_round("noise", {"defense": "noise", "sigma": 0.01}, lr=0.5),
                flower.make_round("fedavg", lr=0.1, local={"epochs": 2, "batch_size": 1})]
    result = flower.run(MODEL, "digits", [[0, 1], [2, 3]], schedule, seed=3, directory=tmp_path / "run",
                        timeout=300)
    assert [(c.server_round, c.partition_id) for c in result.captures] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    dataset = data.load("digits")
    for capture in result.captures:
        model = protocol.received_model(result.setup, dataset, capture)
        images, labels = protocol.partition(result.setup, dataset, capture.partition_id)
        expected = protocol.client_update(model, images, labels, capture.round_spec,
                                          protocol.client_seed(result.setup, capture.server_round,
                                                               capture.partition_id))
        for a, b in zip(protocol.observed_update(model, capture), expected, strict=True):
            assert torch.allclose(a, b, atol=1e-6), capture.label
    # Round 2 started from FedAvg's average of round 1's returned weights (equal sample counts).
    first = [c for c in result.captures if c.server_round == 1]
    second = result.captures[2]
    for name, tensor in second.sent.items():
        assert torch.allclose(tensor, (first[0].returned[name] + first[1].returned[name]) / 2, atol=1e-6)
    launch = result.launch
    assert launch.left_running == [] and launch.foreign_addresses == []
    assert "127.0.0.1" in launch.addresses  # the watcher saw the deployment's sockets at all
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
               for pid in launch.served["pids"])
    if deployment.network_isolation() is not None:
        assert launch.isolated


def test_stop_tree_stops_children_that_left_the_session(tmp_path):
    """A SuperNode's client processes outlive a SIGTERM to their parent: the whole tree must go."""
    script = ("import subprocess, time; subprocess.Popen(['sleep', '120'], start_new_session=True); "
              "time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 10
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = [parent.pid] + [child.pid for child in psutil.Process(parent.pid).children(recursive=True)]
    assert len(tree) == 2
    stopped = deployment.stop_tree(parent.pid, timeout=5)
    parent.wait(timeout=5)
    assert sorted(stopped) == sorted(tree)
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in tree)


def test_a_deployment_past_its_timeout_fails_and_leaves_nothing(tmp_path):
    pytest.importorskip("flwr")
    before = {p.pid for p in psutil.process_iter() if "flower-" in " ".join(_cmdline(p))}
    with pytest.raises(RuntimeError, match="deployment failed") as failure:
        flower.run(MODEL, "digits", [[0]], [flower.make_round("none")], directory=tmp_path / "run", timeout=2)
    assert f"kept in {tmp_path / 'run'}" in str(failure.value)  # the logs stay for the reader
    after = {p.pid for p in psutil.process_iter() if "flower-" in " ".join(_cmdline(p))}
    assert after <= before


def _cmdline(process) -> list:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def test_a_temporary_folder_goes_once_the_captures_are_read(tmp_path, monkeypatch):
    """Without ``directory`` the run's folder (app, logs, about 30-80 MB of captures) must not outlive it."""
    import gradcore.flower as package

    folder = tmp_path / "temporary"
    monkeypatch.setattr(package, "require_flower", lambda: None)
    monkeypatch.setattr(package.tempfile, "mkdtemp", lambda prefix: str(folder.mkdir() or folder))
    monkeypatch.setattr(package.deployment, "write_app", lambda *args: None)
    monkeypatch.setattr(package.deployment, "launch", lambda *args, **kwargs: "launched")
    monkeypatch.setattr(package.protocol, "load_captures", lambda directory: ["capture"])
    result = flower.run(MODEL, "digits", [[0]], [flower.make_round("none")])
    assert result.captures == ["capture"] and result.launch == "launched"
    assert not folder.exists()
