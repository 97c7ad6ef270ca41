"""vLLM's real CPU<->GPU offload worker (``CPUOffloadingWorker``) as a data plane, on the
``vllm`` target (``pytest --target vllm properties/test_offload_worker.py``).

Properties, for any program of GPU writes, stores, loads, polls and waits that a legal model
runner could issue (no job touches a GPU block or CPU chunk another pending job uses):

- "bytes-round-trip": a GPU block loaded from a chunk holds exactly the bytes of the GPU block
  last stored into that chunk, as they were when the store was submitted;
- "finished-once": every submitted job is reported by ``get_finished`` exactly once, with
  success, whatever the order of polls and waits.

Runs only on CUDA (the handler refuses CPU tensors); on CPU the test is a skip quoting vLLM's
own refusal, and ``test_cpu_refusal_names_vllms_check`` checks that reason is exact.
``tools/gpu_check.sh`` runs this file on a GPU.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import TargetUnavailable

NUM_GPU_BLOCKS, NUM_CPU_CHUNKS, PAGE_BYTES = 6, 6, 256


def worker_or_skip(target: str):
    if target != "vllm":
        pytest.skip(f"target {target}: the CPU<->GPU offload worker is vLLM's; run with "
                    "--target vllm")
    from sim.vllm.offload_worker import make_offload_worker
    try:
        return make_offload_worker(NUM_GPU_BLOCKS, NUM_CPU_CHUNKS, PAGE_BYTES)
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
def test_offload_worker_round_trips_bytes_and_finishes_jobs_once(target):
    worker = worker_or_skip(target)
    print(f"offload worker copy op: {worker.copy_op}")

    @settings(max_examples=60, deadline=None)
    @given(program=ops)
    def check(program):
        run_program(worker, program)

    try:
        check()
    finally:
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
