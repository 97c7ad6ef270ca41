"""The ``vllm`` target's CPU<->GPU data plane: vLLM 0.33.0's real ``CPUOffloadingWorker``
(``vllm/v1/kv_offload/cpu/gpu_worker.py``: two ``SingleDirectionOffloadingHandler``s, a copy
plan per transfer, one stream and two events per job, ``transfer_async``, ``get_finished``).

The harness plays the model runner: it owns one int8 GPU KV tensor ``(num_gpu_blocks,
page_bytes)``, writes and reads GPU blocks on the current stream, and submits stores (GPU
block ids -> CPU chunk ids) and loads (CPU chunks -> GPU blocks) with ``blocks_per_chunk=1``.
The checks (``properties/test_offload_worker.py``): bytes loaded into a GPU block equal the
bytes stored from the GPU block that went to that chunk; every job is reported finished exactly
once, successful, whatever the polling and waiting order.

Where it runs:

- CUDA: the real handler. If vLLM's compiled op (``torch.ops._C.swap_blocks_batch``) did not
  load next to this torch, a torch-only stand-in with the same contract (one byte copy per
  descriptor, queued on the handler's stream) replaces exactly that op, and ``copy_op`` says
  so; everything else (plans, streams, events, ordering, completion) is vLLM's.
- CPU: the handler cannot run, on the simulated device or otherwise: its constructor asserts
  that the GPU tensors are CUDA or XPU tensors and its copies go through a compiled op on raw
  device pointers, which no queue of ours can intercept. ``make_offload_worker`` raises
  ``TargetUnavailable`` quoting the assertion vLLM raised, so the test is a skip with that
  exact reason (never a pass).

The private fields it touches go through ``offload_engine_compat``. Nothing of vLLM's code is
copied here.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Sequence

from sim.errors import TargetUnavailable
from sim.vllm import offload_engine_compat, release

WORKER_MODULE = "vllm.v1.kv_offload.cpu.gpu_worker"


def make_offload_worker(num_gpu_blocks: int, num_cpu_chunks: int, page_bytes: int = 256):
    import torch
    if torch.cuda.is_available():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cuda")   # before release.load()'s "cpu"
    gpu_worker = release.import_module(WORKER_MODULE)
    if not torch.cuda.is_available():
        raise TargetUnavailable(cpu_refusal(gpu_worker))
    return VllmOffloadWorker(gpu_worker, num_gpu_blocks, num_cpu_chunks, page_bytes)


def cpu_refusal(gpu_worker) -> str:
    """Why vLLM's handler cannot run on CPU tensors, in vLLM's own words: build one with CPU
    tensors and quote the check that refuses them."""
    import torch
    cpu = torch.zeros((2, 8), dtype=torch.int8)
    try:
        gpu_worker.SingleDirectionOffloadingHandler(
            gpu_tensors=[cpu], cpu_tensors=[cpu.clone()], blocks_per_chunk=1,
            layer_refs_per_group=[[]], gpu_to_cpu=True)
    except AssertionError as refused:
        frame = traceback.extract_tb(refused.__traceback__)[-1]
        where = f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
        return (f"vLLM {release.release_or_unknown()}: SingleDirectionOffloadingHandler "
                f"refuses CPU tensors ({where}: `{frame.line}`), and its copies go through "
                f"a compiled op on raw device pointers ({_compiled_op_state()}), which the "
                "simulated device cannot queue: the real worker runs only on CUDA "
                "(tools/gpu_check.sh)")
    return (f"vLLM {release.release_or_unknown()}: SingleDirectionOffloadingHandler accepted "
            "CPU tensors, which this adapter does not expect; it has no CPU path: extend "
            "sim/vllm/offload_worker.py for this release")


def _compiled_op_state() -> str:
    import torch
    try:
        torch.ops._C.swap_blocks_batch        # noqa: B018 - resolving the op is the probe
    except (AttributeError, RuntimeError):
        return "torch.ops._C.swap_blocks_batch is not loaded here"
    return "torch.ops._C.swap_blocks_batch"


class VllmOffloadWorker:
    """The real worker plus the harness's GPU KV tensor and its byte-level helpers."""

    def __init__(self, gpu_worker, num_gpu_blocks: int, num_cpu_chunks: int, page_bytes: int):
        import torch
        base = release.import_module("vllm.v1.kv_offload.base")
        common = release.import_module("vllm.v1.kv_offload.cpu.common")
        self._torch, self._base, self._common = torch, base, common
        self.page_bytes = page_bytes
        self.gpu = torch.zeros((num_gpu_blocks, page_bytes), dtype=torch.int8, device="cuda")
        caches = base.CanonicalKVCaches(
            tensors=[base.CanonicalKVCacheTensor(tensor=self.gpu, page_size_bytes=page_bytes)],
            group_data_refs=[[base.CanonicalKVCacheRef(tensor_idx=0,
                                                       page_size_bytes=page_bytes)]])
        self.worker = gpu_worker.CPUOffloadingWorker(caches, blocks_per_chunk=1,
                                                     num_cpu_chunks=num_cpu_chunks)
        self.copy_op = _compiled_op_state()
        if self.copy_op != "torch.ops._C.swap_blocks_batch":
            self.copy_op = "torch-only stand-in for swap_blocks_batch (vllm._C did not load)"
            for handler in offload_engine_compat.transfer_handlers(self.worker):
                copy = offload_engine_compat.copy_function(handler)
                if getattr(copy, "__module__", "").startswith("vllm._custom_ops"):
                    offload_engine_compat.set_copy_function(handler, self._stand_in)

    def _cpu(self):
        return offload_engine_compat.cpu_tensor(self.worker)

    def _stand_in(self, src, dst, sizes, is_src_access_order_any: bool = False) -> None:
        """Same contract as ``swap_blocks_batch``: copy ``sizes[i]`` bytes from address
        ``src[i]`` to ``dst[i]``, queued on the current stream. Addresses are mapped back to
        the two tensors the worker copies between (the only memory it is given)."""
        regions = [self.gpu, self._cpu()]
        for s, d, n in zip(src.tolist(), dst.tolist(), sizes.tolist(), strict=True):
            self._view(regions, d, n).copy_(self._view(regions, s, n), non_blocking=True)

    @staticmethod
    def _view(regions, address: int, size: int):
        for tensor in regions:
            flat, start = tensor.view(-1), tensor.data_ptr()
            if start <= address and address + size <= start + flat.numel():
                return flat[address - start:address - start + size]
        raise ValueError(f"address {address:#x} (+{size}) is in neither KV tensor")

    # -- what the harness does as the model runner ---------------------------------------

    def write_gpu(self, block: int, data: bytes) -> None:
        values = self._torch.frombuffer(bytearray(data), dtype=self._torch.int8)
        self.gpu[block].copy_(values.to("cuda"))

    def read_gpu(self, block: int) -> bytes:
        return bytes(self.gpu[block].cpu().numpy().tobytes())

    def submit_store(self, job_id: int, gpu_blocks: Sequence[int],
                     cpu_chunks: Sequence[int]) -> bool:
        return self.worker.submit_store(job_id, self._gpu_spec(gpu_blocks),
                                        self._common.CPULoadStoreSpec(list(cpu_chunks)))

    def submit_load(self, job_id: int, cpu_chunks: Sequence[int], gpu_blocks: Sequence[int],
                    expedited: bool = False) -> bool:
        return self.worker.submit_load(job_id, self._common.CPULoadStoreSpec(list(cpu_chunks)),
                                       self._gpu_spec(gpu_blocks), expedited=expedited)

    def get_finished(self) -> list[tuple[int, bool]]:
        return [(r.job_id, r.success) for r in self.worker.get_finished()]

    def wait(self, job_ids: set[int]) -> None:
        self.worker.wait(job_ids)

    def shutdown(self) -> None:
        self.worker.shutdown()

    def _gpu_spec(self, blocks: Sequence[int]):
        return self._base.GPULoadStoreSpec(list(blocks), group_sizes=[len(blocks)],
                                           block_indices=[0])
