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

- CUDA: the real handler. vLLM's CUDA platform module imports the compiled extension
  (``vllm._C_stable_libtorch``) unconditionally; where it does not load (only vLLM's Python
  files are installed, or it was built for another torch), an empty stand-in module takes its
  place so that the platform imports, and ``extension`` says so. Where the compiled batch
  copy (``torch.ops._C_cache_ops.swap_blocks_batch``) is missing, a torch-only stand-in with
  the same contract (one byte copy per descriptor, queued on the handler's stream) takes
  exactly its place, on every path that reaches it: the GPU->CPU handler's copy and the
  small-batch fallback of vLLM's Triton path; ``copy_op`` says which. Everything else (the
  copy each handler picks, plans, vLLM's Triton kernel for CPU->GPU loads of small pinned
  pages, streams, events, ordering, completion) is vLLM's, and ``copy_paths()`` says per
  handler which copy vLLM picked and what ran under it (the Triton kernel, the compiled op
  or the stand-in), with counts, so a record can say which path was checked.
- CPU: the handler cannot run, on the simulated device or otherwise: its constructor asserts
  that the GPU tensors are CUDA or XPU tensors and its copies go through a compiled op on raw
  device pointers, which no queue of ours can intercept. ``make_offload_worker`` raises
  ``TargetUnavailable`` quoting the assertion vLLM raised, so the test is a skip with that
  exact reason (never a pass).

The private fields it touches go through ``offload_engine_compat``. Nothing of vLLM's code is
copied here.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import traceback
import types
from collections import Counter
from collections.abc import Callable, Sequence

from sim.errors import TargetUnavailable
from sim.vllm import offload_engine_compat, release

WORKER_MODULE = "vllm.v1.kv_offload.cpu.gpu_worker"
CUSTOM_OPS_MODULE = "vllm._custom_ops"

# What can run under a handler's copy (``copy_paths()``).
TRITON_KERNEL = "vLLM's Triton kernel (swap_blocks_triton._swap_blocks_kernel)"
COMPILED_OP = "vLLM's compiled op (torch.ops._C_cache_ops.swap_blocks_batch)"
STAND_IN = "torch stand-in for swap_blocks_batch (vLLM's compiled op did not load)"
# The worker's three handlers (``offload_engine_compat.transfer_handlers``) and what they copy.
HANDLERS = {"store": "gpu->cpu", "load": "cpu->gpu", "expedited load": "cpu->gpu"}


def make_offload_worker(num_gpu_blocks: int, num_cpu_chunks: int, page_bytes: int = 256):
    import torch
    extension = None
    if torch.cuda.is_available():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cuda")   # before release.load()'s "cpu"
        release.load()
        extension = load_compiled_extension()
    gpu_worker = release.import_module(WORKER_MODULE)
    if not torch.cuda.is_available():
        raise TargetUnavailable(cpu_refusal(gpu_worker))
    return VllmOffloadWorker(gpu_worker, num_gpu_blocks, num_cpu_chunks, page_bytes, extension)


def load_compiled_extension() -> str:
    """Import vLLM's compiled extension, or put an empty stand-in module in its place; says
    which. Why a stand-in: vLLM's CUDA platform module imports the extension only so that its
    ops register, and the worker calls one of them, the batch copy, which
    ``VllmOffloadWorker`` replaces where it is missing. Any other op that something calls is
    still missing and fails loudly: no op is faked."""
    name = offload_engine_compat.COMPILED_EXTENSION
    loaded = sys.modules.get(name)
    if loaded is not None:
        return getattr(loaded, "LCH_STAND_IN", f"{name} loaded")
    try:
        importlib.import_module(name)
    except (ImportError, OSError) as error:
        first_line = (str(error).splitlines() or [""])[0][:300]
        stand_in = types.ModuleType(name, "llm-cache-harness: empty stand-in for vLLM's "
                                          "compiled extension (sim/vllm/offload_worker.py)")
        stand_in.LCH_STAND_IN = (f"{name} did not load ({type(error).__name__}: {first_line}); "
                                 "an empty stand-in module lets vllm.platforms.cuda import")
        sys.modules[name] = stand_in
        return stand_in.LCH_STAND_IN
    return f"{name} loaded"


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
    try:
        offload_engine_compat.compiled_copy_op()
    except (AttributeError, RuntimeError):
        return "torch.ops._C_cache_ops.swap_blocks_batch is not loaded here"
    return "torch.ops._C_cache_ops.swap_blocks_batch"


class CopyPaths:
    """Per handler: the copy vLLM picked for it, and what ran under that copy (vLLM's Triton
    kernel, its compiled op or the stand-in), one count per call."""

    OUTSIDE = "outside a transfer"

    def __init__(self) -> None:
        self.chosen: dict[str, str] = {}
        self.ran: dict[str, Counter] = {}
        self._handler: str | None = None

    def through(self, handler: str, copy: Callable) -> Callable:
        """``copy`` as handler ``handler`` calls it: what runs inside counts for it."""
        def copy_for_handler(*args, **kwargs):
            self._handler = handler
            try:
                return copy(*args, **kwargs)
            finally:
                self._handler = None
        return copy_for_handler

    def ran_path(self, path: str) -> None:
        self.ran.setdefault(self._handler or self.OUTSIDE, Counter())[path] += 1

    def report(self) -> dict:
        report = {name: {"direction": direction, "chosen": self.chosen.get(name, "not built"),
                         "ran": dict(sorted(self.ran.get(name, Counter()).items()))}
                  for name, direction in HANDLERS.items()}
        if self.OUTSIDE in self.ran:
            report[self.OUTSIDE] = {"ran": dict(sorted(self.ran[self.OUTSIDE].items()))}
        return report


class CountedKernel:
    """vLLM's Triton kernel, launched as vLLM launches it (``kernel[grid](...)``), each launch
    counted in ``paths``."""

    def __init__(self, kernel, paths: CopyPaths) -> None:
        self.kernel, self._paths = kernel, paths

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def counted_launch(*args, **kwargs):
            self._paths.ran_path(TRITON_KERNEL)
            return launch(*args, **kwargs)
        return counted_launch

    def __getattr__(self, name: str):
        return getattr(self.kernel, name)


def describe_copy(copy, counted_slot: Callable, triton_module) -> str:
    """The copy a handler picked, as the record names it."""
    if copy is counted_slot:
        return "vllm._custom_ops.swap_blocks_batch (the compiled op)"
    if isinstance(copy, functools.partial) \
            and copy.func is offload_engine_compat.triton_copy(triton_module):
        chunk = copy.keywords.get("bytes_per_chunk")
        return (f"vLLM's Triton path (swap_blocks_triton.swap_blocks_batch, bytes_per_chunk="
                f"{chunk}; small batches fall back to the compiled op)")
    return f"{getattr(copy, '__module__', '?')}.{getattr(copy, '__qualname__', repr(copy))}"


class VllmOffloadWorker:
    """The real worker plus the harness's GPU KV tensor and its byte-level helpers."""

    def __init__(self, gpu_worker, num_gpu_blocks: int, num_cpu_chunks: int, page_bytes: int,
                 extension: str | None = None):
        import torch
        base = release.import_module("vllm.v1.kv_offload.base")
        common = release.import_module("vllm.v1.kv_offload.cpu.common")
        custom_ops = release.import_module(CUSTOM_OPS_MODULE)
        triton_module = release.import_module(offload_engine_compat.TRITON_COPY_MODULE)
        self._torch, self._base, self._common = torch, base, common
        self.page_bytes = page_bytes
        self.extension = extension or "not imported by the adapter"
        self.paths = CopyPaths()
        compiled = _compiled_op_state() == "torch.ops._C_cache_ops.swap_blocks_batch"
        self.copy_op = COMPILED_OP if compiled else STAND_IN
        under = offload_engine_compat.copy_op_slot(custom_ops) if compiled else self._stand_in

        def counted_slot(src, dst, sizes, is_src_access_order_any: bool = False) -> None:
            self.paths.ran_path(self.copy_op)
            under(src, dst, sizes, is_src_access_order_any=is_src_access_order_any)

        # In place before the worker is built: a handler reads the slot when it picks its
        # copy, the Triton path's fallback on every call. Both put back by shutdown().
        slot, kernel = (offload_engine_compat.copy_op_slot(custom_ops),
                        offload_engine_compat.triton_kernel(triton_module))
        offload_engine_compat.set_copy_op_slot(custom_ops, counted_slot)
        offload_engine_compat.set_triton_kernel(triton_module, CountedKernel(kernel, self.paths))

        def restore() -> None:
            offload_engine_compat.set_copy_op_slot(custom_ops, slot)
            offload_engine_compat.set_triton_kernel(triton_module, kernel)
        self._restore = restore
        try:
            self.gpu = torch.zeros((num_gpu_blocks, page_bytes), dtype=torch.int8,
                                   device="cuda")
            caches = base.CanonicalKVCaches(
                tensors=[base.CanonicalKVCacheTensor(tensor=self.gpu,
                                                     page_size_bytes=page_bytes)],
                group_data_refs=[[base.CanonicalKVCacheRef(tensor_idx=0,
                                                           page_size_bytes=page_bytes)]])
            self.worker = gpu_worker.CPUOffloadingWorker(caches, blocks_per_chunk=1,
                                                         num_cpu_chunks=num_cpu_chunks)
        except BaseException:
            restore()
            raise
        handlers = offload_engine_compat.transfer_handlers(self.worker)
        for name, handler in zip(HANDLERS, handlers, strict=True):
            copy = offload_engine_compat.copy_function(handler)
            self.paths.chosen[name] = describe_copy(copy, counted_slot, triton_module)
            offload_engine_compat.set_copy_function(handler, self.paths.through(name, copy))

    def copy_paths(self) -> dict:
        """Per handler: direction, the copy vLLM picked, and what ran under it, counted."""
        return self.paths.report()

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
        try:
            self.worker.shutdown()
        finally:
            self._restore()

    def _gpu_spec(self, blocks: Sequence[int]):
        return self._base.GPULoadStoreSpec(list(blocks), group_sizes=[len(blocks)],
                                           block_indices=[0])
