"""The model and the optimizer as `Stateful`s keyed by parameter name, what a checkpoint's DCP files hold.

    states = {"model": ModelState(model), "optim": OptimizerState(model, optimizer)}
    Checkpoints(run.checkpoints, keep=2, tensors=states, records=[...])

The same layout for every parallel mode: FSDP2 shards, DDP replicas, pipeline stages and a plain model
all give and take `model.<name>` and `optim.state.<name>...` keys, so a checkpoint restores on any layout.
ZeRO-1 is not covered by torch's `get_optimizer_state_dict`: each process gives the AdamW state of the
parameters it owns (created empty before the first step, so that a load fills it in place), and DCP
joins the processes' keys into the same `state` / `param_groups` layout DDP and FSDP2 write.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from pretrainkit.train.parallel.data_parallel import sharded_optimizer, unwrap


class ModelState:
    """The model's weights (this process's shards of them)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict:
        return get_model_state_dict(self.model)

    def load_state_dict(self, state: dict) -> None:
        set_model_state_dict(self.model, state)


class OptimizerState:
    """AdamW's moments and step counts, and its param groups' hyperparameters."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict:
        zero = sharded_optimizer(self.optimizer)
        if zero is None:
            return get_optimizer_state_dict(self.model, self.optimizer)
        names = {id(p): n for n, p in unwrap(self.model).named_parameters()}
        state = {}
        for group in zero.param_groups:
            for p in group["params"]:
                s = zero.state[p]
                if not s:
                    s.update(step=torch.zeros(()), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state[names[id(p)]] = s
        groups = [
            {**{k: v for k, v in g.items() if k != "params"}, "params": [names[id(p)] for p in g["params"]]}
            for g in self.optimizer.param_groups
        ]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state: dict) -> None:
        if sharded_optimizer(self.optimizer) is None:  # ZeRO-1's shard was loaded in place, into its own tensors
            set_optimizer_state_dict(self.model, self.optimizer, state)
