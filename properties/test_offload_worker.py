"""vLLM's real CPU<->GPU offload worker (``CPUOffloadingWorker``) as a data plane, on the
``vllm`` target (``pytest --target vllm properties/test_offload_worker.py``).

Properties, for any program of GPU writes, stores, loads, polls and waits that a legal model
runner could issue (no job touches a GPU block or CPU chunk another pending job uses):

- "bytes-round-trip": a GPU block loaded from a chunk holds exactly the bytes of the GPU block
  last stored into that chunk, as they were when the store was submitted;
- "finished-once": every submitted job is reported by ``get_finished`` exactly once, with
  success, whatever the order of polls and waits.

Which copy ran: jobs of one block go through the compiled op (or its stand-in) both ways;
loads of ``MIN_N`` (16) blocks or more of small pinned pages go through vLLM's Triton kernel
(``test_batched_jobs_round_trip_bytes``). Each CUDA test records the copy paths that ran, per
handler (``record_property("vllm_copy_paths", ...)``: ``tools/gpu_check.sh`` puts them in its
record).

Runs only on CUDA (the handler refuses CPU tensors); on CPU the test is a skip quoting vLLM's
own refusal, and ``test_cpu_refusal_names_vllms_check`` checks that reason is exact.
``tools/gpu_check.sh`` runs this file on a GPU.
"""

from __future__ import annotations

import functools
import os
import types

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.errors import TargetUnavailable

NUM_GPU_BLOCKS, NUM_CPU_CHUNKS, PAGE_BYTES = 6, 6, 256
# Batched jobs: up to 32 blocks in one job, past vLLM 0.33.0's MIN_N (16 descriptors), from
# which a CPU->GPU load of pages under 28 KiB runs its Triton kernel.
BATCH_BLOCKS = 32


def worker_or_skip(target: str, num_blocks: int = NUM_GPU_BLOCKS):
    if target != "vllm":
        pytest.skip(f"target {target}: the CPU<->GPU offload worker is vLLM's; run with "
                    "--target vllm")
    from sim.vllm.offload_worker import make_offload_worker
    try:
        return make_offload_worker(num_blocks, num_blocks, PAGE_BYTES)
    except TargetUnavailable as why:
        if os.environ.get("LCH_REQUIRE_TARGETS"):
            pytest.fail(f"target vllm is required here but the offload worker cannot run: {why}")
        pytest.skip(str(why))


ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, NUM_GPU_BLOCKS - 1), st.integers(0, 255)),
    st.tuples(st.just("store"), st.integers(0, NUM_GPU_BLOCKS - 1),
              st.integers(0, NUM_CPU_CHUNKS - 1)),
    st.tuples(st.just("load"), st.integers(0, NUM_CPU_CHUNKS - 1),
              st.integers(0, NUM_GPU_BLOCKS - 1), st.booleans()),
    st.tuples(st.just("poll")),
    st.tuples(st.just("wait"), st.integers(0, 7))), max_size=25)


@pytest.mark.gpu
@pytest.mark.xdist_group("gpu")
def test_offload_worker_round_trips_bytes_and_finishes_jobs_once(target, record_property):
    worker = worker_or_skip(target)

    @settings(max_examples=60, deadline=None)
    @given(program=ops)
    def check(program):
        run_program(worker, program)

    try:
        check()
    finally:
        record_copy_paths(worker, record_property)
        worker.shutdown()


def record_copy_paths(worker, record_property) -> None:
    """What ran, for the record (tools/gpu_check.sh) and the log: vLLM's compiled extension
    or its stand-in module, the compiled op or its stand-in, and per handler the copy vLLM
    picked and what ran under it."""
    record_property("vllm_extension", worker.extension)
    record_property("vllm_copy_op", worker.copy_op)
    record_property("vllm_copy_paths", worker.copy_paths())
    print(f"offload worker: {worker.extension}; copy op: {worker.copy_op}; "
          f"copy paths: {worker.copy_paths()}")


@pytest.mark.gpu
@pytest.mark.xdist_group("gpu")
def test_batched_jobs_round_trip_bytes(target, record_property):
    """One store of n GPU blocks into n chunks, then one load of those chunks into n other
    GPU blocks: each loaded block holds the bytes of the block stored into its chunk. From
    16 blocks on, vLLM 0.33.0 loads through its Triton kernel; below, through the compiled
    op (or the stand-in), so both load paths are checked."""
    worker = worker_or_skip(target, BATCH_BLOCKS)
    blocks = st.permutations(range(BATCH_BLOCKS))
    job_ids = iter(range(10**6))

    @settings(max_examples=20, deadline=None)
    @given(n=st.integers(1, BATCH_BLOCKS), sources=blocks, chunks=blocks, targets=blocks,
           expedited=st.booleans())
    @example(n=BATCH_BLOCKS, sources=list(range(BATCH_BLOCKS)),
             chunks=list(range(BATCH_BLOCKS)), targets=list(reversed(range(BATCH_BLOCKS))),
             expedited=False)
    @example(n=16, sources=list(range(16, 32)), chunks=list(range(16)),
             targets=list(range(16)), expedited=True)
    def check(n, sources, chunks, targets, expedited):
        sources, chunks, targets = sources[:n], chunks[:n], targets[:n]
        stored = {}
        for i, block in enumerate(sources):
            data = bytes([(7 * i + n) % 256]) * worker.page_bytes
            worker.write_gpu(block, data)
            stored[chunks[i]] = data
        store, load = next(job_ids), next(job_ids)
        assert worker.submit_store(store, sources, chunks)
        worker.wait({store})
        for block in targets:
            worker.write_gpu(block, bytes(worker.page_bytes))
        assert worker.submit_load(load, chunks, targets, expedited=expedited)
        worker.wait({load})
        done = []
        for _ in range(100):
            done += worker.get_finished()
            if len(done) == 2:
                break
        assert sorted(done) == [(store, True), (load, True)], \
            f"finished-once: jobs {store} and {load} reported as {done}"
        for chunk, block in zip(chunks, targets, strict=True):
            assert worker.read_gpu(block) == stored[chunk], \
                f"bytes-round-trip: GPU block {block} loaded from chunk {chunk} in a batch of {n}"

    try:
        check()
    finally:
        record_copy_paths(worker, record_property)
        worker.shutdown()


def run_program(worker, program) -> None:
    chunk_bytes: dict[int, bytes] = {}      # chunk -> bytes of the block stored into it
    expect_gpu: dict[int, bytes] = {}       # GPU block -> bytes once its load finishes
    busy: dict[int, set] = {}               # job -> the GPU blocks and chunks it uses
    finished: list[int] = []
    next_job = 0

    def collect(results):
        for job, ok in results:
            assert ok, f"finished-once: job {job} reported failure"
            assert job in busy, f"finished-once: job {job} reported twice or never submitted"
            finished.append(job)
            del busy[job]

    def in_use(*names) -> bool:
        return any(used & set(names) for used in busy.values())

    for op in program:
        if op[0] == "write" and not in_use(("gpu", op[1])):
            data = bytes([op[2]]) * worker.page_bytes
            worker.write_gpu(op[1], data)
            expect_gpu[op[1]] = data
        elif op[0] == "store" and not in_use(("gpu", op[1]), ("cpu", op[2])):
            chunk_bytes[op[2]] = worker.read_gpu(op[1])
            assert worker.submit_store(next_job, [op[1]], [op[2]])
            busy[next_job], next_job = {("gpu", op[1]), ("cpu", op[2])}, next_job + 1
        elif op[0] == "load" and op[1] in chunk_bytes \
                and not in_use(("gpu", op[2]), ("cpu", op[1])):
            assert worker.submit_load(next_job, [op[1]], [op[2]], expedited=op[3])
            expect_gpu[op[2]] = chunk_bytes[op[1]]
            busy[next_job], next_job = {("gpu", op[2]), ("cpu", op[1])}, next_job + 1
        elif op[0] == "poll":
            collect(worker.get_finished())
        elif op[0] == "wait" and busy:
            jobs = sorted(busy)
            worker.wait({jobs[op[1] % len(jobs)]})
    worker.wait(set(busy))
    for _ in range(100):            # events queried after wait(): all finished
        collect(worker.get_finished())
        if not busy:
            break
    assert not busy, f"finished-once: jobs {sorted(busy)} never reported finished"
    assert sorted(finished) == list(range(next_job)), "finished-once: a job is missing"
    for block, data in sorted(expect_gpu.items()):
        assert worker.read_gpu(block) == data, \
            f"bytes-round-trip: GPU block {block} does not hold the bytes loaded into it"


def test_cpu_refusal_names_vllms_check():
    """On CPU the skip reason is vLLM's own assertion, quoted with its file and line."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible: the worker runs for real here")
    from sim.vllm import release
    try:
        gpu_worker = release.import_module("vllm.v1.kv_offload.cpu.gpu_worker")
    except TargetUnavailable as why:
        pytest.skip(str(why))
    from sim.vllm.offload_worker import cpu_refusal
    reason = cpu_refusal(gpu_worker)
    assert "vllm/v1/kv_offload/cpu/gpu_worker.py:" in reason
    assert "`assert gpu_tensor.is_cuda or gpu_tensor.is_xpu`" in reason
    assert "simulated device cannot queue" in reason


# -- the copy-path record, on CPU (fakes in place of vLLM's modules) --------------------------

def test_copy_paths_count_what_ran_under_each_handler():
    from sim.vllm.offload_worker import (
        STAND_IN,
        TRITON_KERNEL,
        CopyPaths,
        CountedKernel,
        describe_copy,
    )
    paths = CopyPaths()
    launches = []
    kernel = CountedKernel({"grid": lambda *args: launches.append(args)}, paths)

    def slot(*args, **kwargs):
        paths.ran_path(STAND_IN)

    def triton_copy(src, dst, sizes, is_src_access_order_any=False, *, bytes_per_chunk):
        if len(src) < 2:
            slot(src, dst, sizes)
        else:
            kernel["grid"](src)

    triton_module = types.SimpleNamespace(swap_blocks_batch=triton_copy)
    load = functools.partial(triton_copy, bytes_per_chunk=256)
    paths.chosen = {"store": describe_copy(slot, slot, triton_module),
                    "load": describe_copy(load, slot, triton_module)}
    paths.through("store", slot)([1], [2], [3])
    paths.through("load", load)([1], [2], [3])
    paths.through("load", load)([1, 2], [3, 4], [5, 6])
    report = paths.report()
    assert report["store"] == {"direction": "gpu->cpu",
                               "chosen": "vllm._custom_ops.swap_blocks_batch (the compiled op)",
                               "ran": {STAND_IN: 1}}
    assert report["load"]["chosen"].startswith("vLLM's Triton path")
    assert "bytes_per_chunk=256" in report["load"]["chosen"]
    assert report["load"]["ran"] == {STAND_IN: 1, TRITON_KERNEL: 1}
    assert report["expedited load"] == {"direction": "cpu->gpu", "chosen": "not built",
                                        "ran": {}}
    assert launches == [([1, 2],)]
