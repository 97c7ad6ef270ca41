"""Written-out witnesses of the encoder caches' properties (both managers' machines)."""

from __future__ import annotations

from models.encoder_cache_values import MmItem, ReqView
from properties.encoder_cache_worlds import EncoderCacheWorld
from properties.witnesses.kinds import Scenario

ENCODER = "properties.encoder_cache_machine:EncoderCacheMachine"
ENCODER_DECODER = "properties.encoder_decoder_cache_machine:EncoderDecoderCacheMachine"
BROKEN = "fixtures.broken.encoder_cache:"
BROKEN_ENCDEC = "fixtures.broken.encoder_decoder_cache:"

IMG0 = MmItem("img0", 1)
ONE_ITEM = EncoderCacheWorld(1, (ReqView("r0", (IMG0,)),))
IMG1 = MmItem("img1", 1)
REPEATED = EncoderCacheWorld(1, (ReqView("r0", (IMG0, IMG0)),))
TWO_ITEMS = EncoderCacheWorld(2, (ReqView("r0", (IMG0, IMG1)),))
TWO_ITEMS_ONE_SLOT = EncoderCacheWorld(1, (ReqView("r0", (IMG0, IMG1)),))
# Two 1-embed items fill the cache; a 2-embed item then evicts both in one pass.
TWO_EVICTED = EncoderCacheWorld(2, (ReqView("r0", (IMG0, IMG1, MmItem("img2", 2))),))
ENCDEC_ONE = EncoderCacheWorld(1, (ReqView("r0", (IMG0,)),), manager="encoder_decoder")

SCENARIOS = (
    Scenario("encoder-cache-refuses-exact-budget", ENCODER, "returns-agree", ONE_ITEM,
             (("can_allocate", 0, 0, 0, 0),), BROKEN + "RefusesExactBudget",
             "an item with exactly the compute budget's embeds is refused"),
    Scenario("encoder-cache-records-by-residency", ENCODER, "cached-inputs-agree", REPEATED,
             (("can_allocate", 0, 0, 0, 0), ("allocate",)), BROKEN + "RecordsByResidency",
             "input 1 repeats input 0's item and was never recorded, yet it is reported"),
    Scenario("encoder-cache-reports-last-eviction", ENCODER, "worker-agrees-with-manager",
             TWO_EVICTED,
             (("can_allocate", 0, 0, 0, 0), ("allocate",), ("can_allocate", 0, 1, 0, 0),
              ("allocate",), ("free", 0), ("can_allocate", 0, 2, 0, 0),
              ("get_freed_mm_hashes",)), BROKEN + "ReportsLastEviction",
             "one pass evicts img0 and img1; the freed list names img1 only"),
    Scenario("encoder-cache-keeps-finished-requests", ENCODER, "bookkeeping-bounded",
             ONE_ITEM, (("can_allocate", 0, 0, 0, 0), ("allocate",), ("free", 0)),
             BROKEN + "KeepsFinishedRequests", "r0 finished, its record stays"),
    Scenario("encoder-cache-idle-queue-keeps-held", ENCODER, "check-valid", REPEATED,
             (("can_allocate", 0, 0, 0, 0), ("allocate",), ("free", 0),
              ("check_and_update_cache", 0, 1)), BROKEN + "IdleQueueKeepsHeld",
             "img0 turns freeable, then r0 holds it again: it stays in the idle queue"),
    Scenario("encoder-decoder-cache-held-inputs-only", ENCODER_DECODER, "cached-inputs-agree",
             ENCDEC_ONE, (), BROKEN_ENCDEC + "HeldInputsOnly",
             "r0 holds nothing yet: its one input must be reported, it is not"),
    Scenario("encoder-decoder-cache-skips-idle-pass", ENCODER_DECODER,
             "worker-agrees-with-manager", ENCDEC_ONE,
             (("can_allocate", 0, 0, 0, 0), ("allocate",), ("get_freed_mm_hashes",),
              ("get_freed_mm_hashes",)), BROKEN_ENCDEC + "SkipsIdlePass",
             "img0 is encoded in pass 1; pass 2 allocates nothing and reports nothing freed"),
)
