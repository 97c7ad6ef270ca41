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


# -- the compiled extension and the copy paths under the handlers ---------------------------------

# vLLM 0.33.0: ``vllm/platforms/cuda.py`` imports it unconditionally (its ops register on
#   import), so the CUDA platform, and with it the worker's streams, needs it to import.
COMPILED_EXTENSION = "vllm._C_stable_libtorch"

# vLLM 0.33.0: the Triton copy for CPU->GPU loads of small pinned pages.
TRITON_COPY_MODULE = "vllm.v1.kv_offload.cpu.swap_blocks_triton"


def compiled_copy_op() -> Any:
    """The compiled batch copy every handler's copies end in (raises AttributeError or
    RuntimeError where the extension did not register it).

    # vLLM 0.33.0: ``vllm._custom_ops.swap_blocks_batch`` calls
    #   ``torch.ops._C_cache_ops.swap_blocks_batch``, registered by ``COMPILED_EXTENSION``.
    """
    import torch
    return torch.ops._C_cache_ops.swap_blocks_batch


def copy_op_slot(custom_ops: Any) -> Any:
    """The Python function in front of the compiled batch copy.

    # vLLM 0.33.0: ``vllm._custom_ops.swap_blocks_batch``, read by name when a handler picks
    #   its copy (``gpu_worker._select_swap_blocks_fn``) and on every call of the Triton
    #   path's small-batch fallback (``swap_blocks_triton.swap_blocks_batch``), so replacing
    #   it before the worker is built replaces the compiled copy on every path.
    """
    return custom_ops.swap_blocks_batch


def set_copy_op_slot(custom_ops: Any, copy: Any) -> None:
    """Put ``copy`` (same contract) in front of the compiled batch copy; see ``copy_op_slot``.

    # vLLM 0.33.0: ``vllm._custom_ops.swap_blocks_batch``.
    """
    custom_ops.swap_blocks_batch = copy


def triton_copy(triton_module: Any) -> Any:
    """The Triton path's entry point, which a CPU->GPU handler holds as a ``functools.partial``.

    # vLLM 0.33.0: ``swap_blocks_triton.swap_blocks_batch`` (``bytes_per_chunk`` bound).
    """
    return triton_module.swap_blocks_batch


def triton_kernel(triton_module: Any) -> Any:
    """The Triton kernel itself, launched as ``kernel[grid](...)`` (only for batches of
    ``MIN_N`` descriptors or more; smaller ones fall back to the compiled copy).

    # vLLM 0.33.0: ``swap_blocks_triton._swap_blocks_kernel``, read by name at each launch.
    """
    return triton_module._swap_blocks_kernel


def set_triton_kernel(triton_module: Any, kernel: Any) -> None:
    """Launch through ``kernel`` instead (the adapter counts launches, then launches the real
    one).

    # vLLM 0.33.0: ``swap_blocks_triton._swap_blocks_kernel``.
    """
    triton_module._swap_blocks_kernel = kernel
