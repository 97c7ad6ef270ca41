"""Private fields of vLLM's CPU offloading worker (``vllm/v1/kv_offload/cpu/gpu_worker.py``)
that the offload-engine adapter (``offload_worker.py``) reaches, one small accessor each,
named for what it reads or replaces.

The worker exposes no handler and no CPU tensor; the harness needs the handlers to put a
torch-only copy in place of the compiled op where ``vllm._C`` did not load, and the CPU
tensor to read back what a store wrote. Each accessor is tagged with the releases it holds
for (``# vLLM <version>:``): read and run in 0.33.0, the one release the offload-engine
suites drive; a release that renames a field fails in here, inside the adapter
(``unavailable``), never as a finding.
"""

from __future__ import annotations

from typing import Any


def transfer_handlers(worker: Any) -> tuple[Any, Any, Any]:
    """The worker's three transfer handlers: store, load, expedited load.

    # vLLM 0.33.0: ``CPUOffloadingWorker._store_handler``, ``_load_handler`` and
    #   ``_expedited_load_handler``.
    """
    return (worker._store_handler, worker._load_handler, worker._expedited_load_handler)


def cpu_tensor(worker: Any) -> Any:
    """The CPU tensor the store handler writes (one per GPU tensor; the harness has one).

    # vLLM 0.33.0: ``CPUOffloadingWorker._store_handler.dst_tensors[0]``.
    """
    return worker._store_handler.dst_tensors[0]


def copy_function(handler: Any) -> Any:
    """The copy function the handler chose (the compiled ``swap_blocks_batch``, or another).

    # vLLM 0.33.0: ``_swap_blocks_batch`` on each handler.
    """
    return handler._swap_blocks_batch


def set_copy_function(handler: Any, copy: Any) -> None:
    """Make the handler copy with ``copy`` (same contract as ``swap_blocks_batch``).

    # vLLM 0.33.0: ``_swap_blocks_batch`` on each handler.
    """
    handler._swap_blocks_batch = copy
