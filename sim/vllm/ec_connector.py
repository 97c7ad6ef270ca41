"""A recording encoder-cache (EC) connector the test controls, for the ``vllm`` scheduler pass.

The real ``Scheduler`` builds it itself: the adapter names it in ``ec_transfer_config``
(``ec_connector="RecordingECConnector"``, ``ec_connector_module_path`` this module) and
``ECConnectorFactory`` imports this module and reads the class off it, as it would any
out-of-tree connector. The class derives from the installed release's ``ECConnectorBase``, so
it is made on first access (``__getattr__`` below), after ``sim.vllm.release`` chose the
release; everything the base class already answers (``ensure_cache_available`` True,
``request_finished`` no delayed free, no unavailable requests) is the base class's.

What it does, scheduler side only:
- ``has_cache_item(identifier)``: True for the hashes in ``external`` (the test sets them: the
  outputs another instance encoded and this connector could load);
- ``update_state_after_alloc(request, index)`` / ``update_state_after_free(request, index)``:
  recorded as ``("alloc" | "free", request_id, index)``; an allocated input whose hash is
  external is to be loaded, as vLLM's example connector decides it;
- ``build_connector_meta(scheduler_output)``: the loads decided since the last call, per
  request (the worker side would load these), and the decisions are cleared.
"""

from __future__ import annotations

import functools
from typing import Any

from sim.vllm import release

CLASS_NAME = "RecordingECConnector"


@functools.cache
def _connector_cls() -> type:
    base = release.import_module("vllm.distributed.ec_transfer.ec_connector.base")

    class RecordingECConnectorMetadata(base.ECConnectorMetadata):
        def __init__(self, loads: dict[str, tuple[int, ...]]):
            self.loads = loads

    class RecordingECConnector(base.ECConnectorBase):
        def __init__(self, vllm_config: Any, role: Any):
            super().__init__(vllm_config, role)
            self.external: frozenset[str] = frozenset()
            self.notices: list[tuple[str, str, int]] = []
            self._loads: dict[str, list[int]] = {}

        # -- scheduler side ----------------------------------------------------------------

        def has_cache_item(self, identifier: str) -> bool:
            return identifier in self.external

        def update_state_after_alloc(self, request: Any, index: int) -> None:
            self.notices.append(("alloc", request.request_id, index))
            if request.mm_features[index].identifier in self.external:
                self._loads.setdefault(request.request_id, []).append(index)

        def update_state_after_free(self, request: Any, index: int) -> None:
            self.notices.append(("free", request.request_id, index))

        def build_connector_meta(self, scheduler_output: Any) -> Any:
            loads, self._loads = self._loads, {}
            return RecordingECConnectorMetadata({r: tuple(ids) for r, ids in loads.items()})

        # -- worker side: never built here (the native worker plays the GPU part) ----------

        def start_load_caches(self, encoder_cache: Any, **kwargs: Any) -> None:
            raise NotImplementedError("the recording connector has no worker side")

        def save_caches(self, encoder_cache: Any, mm_hash: str, **kwargs: Any) -> None:
            raise NotImplementedError("the recording connector has no worker side")

    RecordingECConnector.__name__ = RecordingECConnector.__qualname__ = CLASS_NAME
    return RecordingECConnector


def __getattr__(name: str) -> Any:
    # ECConnectorFactory.get_connector_class: getattr(import_module(path), ec_connector).
    if name == CLASS_NAME:
        return _connector_cls()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
