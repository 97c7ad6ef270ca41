"""The encoder-decoder cache state machine against each ``--target`` (default ``native``).

vLLM's ``EncoderDecoderCacheManager`` (0.14.0 on); on older releases the test reports the
class absent. A failure is minimized and written as a reproducer (``--reproducer-dir``).
"""

from __future__ import annotations

from properties.encoder_decoder_cache_machine import EncoderDecoderCacheMachine
from properties.run import check_machine


def test_encoder_decoder_cache_machine(target, reproducer_dir):
    check_machine(EncoderDecoderCacheMachine, target, reproducer_dir)
