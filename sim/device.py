"""Where native tensors live: CUDA when present, else CPU (override with LCH_DEVICE)."""

from __future__ import annotations

import os

import torch

from sim.errors import HarnessError


def pick_device() -> torch.device:
    wanted = os.environ.get("LCH_DEVICE")
    if wanted:
        if wanted.startswith("cuda") and not torch.cuda.is_available():
            raise HarnessError(f"LCH_DEVICE={wanted} but torch sees no CUDA device; "
                               "unset LCH_DEVICE or install a CUDA build of torch")
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
