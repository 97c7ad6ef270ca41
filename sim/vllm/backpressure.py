"""The ``vllm`` target's drop policies: vLLM 0.33.0's real ``DropStorePolicy`` and
``ThrottledDropPolicy``, asked through a real ``EMABackpressureDetector`` whose pressure and
latency EMA the test sets per decision (the detector's own EMA, warm-up and cooldown run on
the wall clock and are not under test here)."""

from __future__ import annotations

from sim.vllm import release, secondary_tier_compat, tiered_lookup_compat


class VllmDropPolicy:
    def __init__(self, policy: str = "throttled", ramp_factor: float = 2.0):
        bp = release.import_module("vllm.v1.kv_offload.tiering.backpressure")
        self.policy = (bp.DropStorePolicy() if policy == "drop"
                       else bp.ThrottledDropPolicy(ramp_factor=ramp_factor))

        class SetDetector(bp.EMABackpressureDetector):
            """The real detector class (ThrottledDropPolicy asserts it), its state set."""

            pressure = False

            def is_under_pressure(self) -> bool:
                return self.pressure

        self.detector = SetDetector(high_water_s=1.0, low_water_s=0.5, policy=self.policy)

    def should_store(self, under_pressure: bool, ema: float, high: float,
                     num_blocks: int) -> bool:
        d = self.detector
        d.pressure = under_pressure
        secondary_tier_compat.set_store_latency(d, ema, high)
        # The detector's own entry point: its policy decides and it counts a refusal.
        return bool(d.should_store(num_blocks))

    def pop_stores_dropped(self) -> tuple[int, int]:
        return tuple(self.policy.pop_stores_dropped())

    def reset(self) -> None:
        self.policy.reset()



class VllmCascade:
    """vLLM 0.33.0's real ``TieringOffloadingManager`` over a ``CPUPrimaryTierOffloadingManager``
    and one real ``FileSystemTierManager`` (manual job pool) whose back-pressure detector is a
    real ``EMABackpressureDetector`` with its pressure set by the test: each ``store`` is a
    ``prepare_store`` + ``complete_store`` of fresh keys, whose cascade to the tier the policy
    keeps or drops."""

    def __init__(self, policy: str = "throttled", num_chunks: int = 64):
        import tempfile

        from sim.vllm.secondary_tier import ManualPool, _spec
        from sim.vllm.tiered_lookup import _Region
        tiering = release.import_module("vllm.v1.kv_offload.tiering.manager")
        fs = release.import_module("vllm.v1.kv_offload.tiering.fs.manager")
        self._base = release.import_module("vllm.v1.kv_offload.base")
        self.policies = VllmDropPolicy(policy)
        self.primary = tiering.CPUPrimaryTierOffloadingManager(
            num_chunks=num_chunks, mmap_region=_Region(num_chunks), enable_events=False)
        self.root = tempfile.mkdtemp(prefix="lch-vllm-bp-")
        self.tier = fs.FileSystemTierManager(
            _spec(), self.primary.get_kv_memoryview(), "fs", root_dir=self.root,
            n_read_threads=0, n_write_threads=0,
            backpressure_detector=self.policies.detector)
        self.pool = secondary_tier_compat.replace_io_pool(self.tier, ManualPool())
        self.manager = tiering.TieringOffloadingManager(self.primary, [self.tier])
        self._ctx = self._base.ReqContext(req_id="r0")
        with self.manager.lock:
            self.manager.on_new_request(self._ctx)

    def _key(self, i: int):
        return self._base.make_offload_key(i.to_bytes(8, "big"), 0)

    def store(self, keys, under_pressure: bool, ema: float, high: float) -> tuple[int, ...]:
        """Store ``keys`` in the primary; the keys of the cascade job it submitted to the tier
        (empty: dropped)."""
        d = self.policies.detector
        d.pressure = under_pressure
        secondary_tier_compat.set_store_latency(d, ema, high)
        before = set(self.pool.pending)
        vkeys = [self._key(k) for k in keys]
        with self.manager.lock:
            self.manager.prepare_store(vkeys, self._ctx)
            self.manager.complete_store(vkeys, self._ctx)
        new = set(self.pool.pending) - before
        return tuple(keys) if new else ()

    def ref_cnt(self, key: int) -> int | None:
        chunk = tiered_lookup_compat.chunk_status(self.primary, self._key(key))
        return None if chunk is None else int(chunk.ref_cnt)

    def pop_stores_dropped(self) -> tuple[int, int]:
        return self.policies.pop_stores_dropped()

    def close(self) -> None:
        import shutil
        self.manager.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)
