"""The encoder-decoder cache state machine against each ``--target`` (default ``native``).

vLLM's ``EncoderDecoderCacheManager`` (0.14.0 on); on older releases the test reports the
class absent. A failure is minimized and written as a reproducer (``--reproducer-dir``).
The second test frees only what is held, so it checks the rest of the class with its whole
budget on releases that have the unheld-release bug (every one read), which the first meets
again and again.
"""

from __future__ import annotations

from properties.encoder_decoder_cache_machine import (
    EncoderDecoderCacheFreesOnceMachine,
    EncoderDecoderCacheMachine,
)
from properties.run import check_machine


def test_encoder_decoder_cache_machine(target, reproducer_dir):
    check_machine(EncoderDecoderCacheMachine, target, reproducer_dir)


def test_encoder_decoder_cache_machine_frees_once(target, reproducer_dir):
    check_machine(EncoderDecoderCacheFreesOnceMachine, target, reproducer_dir)
