"""The Flower app the book deploys: FedAvg clients training the book's models, and a curious server.

Flower (Beutel et al., 2020) loads these two objects in processes of their own, from the
small app project :func:`gradcore.flower.deployment.write_app` writes: ``client_app`` (one
per SuperNode, its partition given by the node's ``partition-id``) and ``server_app``. Both
read the deployment from the run config's ``setup`` and ``schedule`` (JSON; see
:mod:`gradcore.flower.protocol`).

The server is honest but curious: it runs FedAvg unchanged (McMahan et al., 2017) and, before
averaging, writes down what each client sent back (:class:`CuriousFedAvg`). Everything the
book attacks is read from those records, never from inside the clients.
"""

from __future__ import annotations

import json

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from . import protocol

client_app = ClientApp()
server_app = ServerApp()


def _read(context: Context) -> tuple[dict, list]:
    return json.loads(context.run_config["setup"]), json.loads(context.run_config["schedule"])


@client_app.train()
def train(message: Message, context: Context) -> Message:
    """One client's round: load the global model, compute its (defended) update, send the new
    weights."""
    setup, schedule = _read(context)
    server_round = int(message.content["config"]["server-round"])
    partition_id = int(context.node_config["partition-id"])
    dataset = protocol.dataset_of(setup)
    images, labels = protocol.partition(setup, dataset, partition_id)
    model = protocol.global_model(setup, dataset)
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    update = protocol.client_update(
        model,
        images,
        labels,
        schedule[server_round - 1],
        protocol.client_seed(setup, server_round, partition_id),
    )
    reply = RecordDict(
        {
            "arrays": ArrayRecord(protocol.updated_state(model, update)),
            "metrics": MetricRecord({"num-examples": len(labels), "partition-id": partition_id}),
        }
    )
    return Message(content=reply, reply_to=message)


class CuriousFedAvg(FedAvg):
    """FedAvg whose server keeps, per round and client, the model it sent and the weights it got
    back."""

    def __init__(self, setup: dict, schedule: list, **options):
        super().__init__(**options)
        self.setup, self.schedule, self.sent = setup, schedule, {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ):
        self.sent[server_round] = {
            name: tensor.clone() for name, tensor in arrays.to_torch_state_dict().items()
        }
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies):
        replies = list(replies)
        for reply in replies:
            if reply.has_error():
                continue
            metrics = reply.content["metrics"]
            protocol.save_capture(
                self.setup["captures"],
                protocol.Capture(
                    server_round,
                    int(metrics["partition-id"]),
                    self.schedule[server_round - 1],
                    self.sent[server_round],
                    reply.content["arrays"].to_torch_state_dict(),
                    int(metrics["num-examples"]),
                ),
            )
        return super().aggregate_train(server_round, replies)


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """Run FedAvg for one round per schedule entry, every client in every round, no evaluation."""
    setup, schedule = _read(context)
    torch.manual_seed(setup["seed"])
    model = protocol.global_model(setup, protocol.dataset_of(setup))
    clients = len(setup["partitions"])
    strategy = CuriousFedAvg(
        setup, schedule, fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=len(schedule),
        timeout=600,
    )
