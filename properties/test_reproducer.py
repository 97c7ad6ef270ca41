"""Reproducer emission: the golden text for ``enc-stale-freed``, one file per failure, atomic
writes. The golden file pins what a user pastes into their own suite."""

from __future__ import annotations

from pathlib import Path

from hypothesis import Phase, settings

from fixtures.known_bugs import by_id
from properties.encoder_cache_machine import EncoderCacheMachine
from properties.harness import run_machine
from properties.reproducer import render, write_reproducer

GOLDEN = Path(__file__).parent.parent / "fixtures" / "golden" / "enc_stale_freed_reproducer.txt"


def stale_freed_failure():
    bug = by_id("enc-stale-freed")
    profile = settings(settings.get_profile("ci"), max_examples=bug.max_examples,
                       phases=[Phase.explicit, Phase.generate])
    return run_machine(EncoderCacheMachine, "native:enc-stale-freed", profile).failure


def test_golden_reproducer_for_enc_stale_freed():
    text = render(EncoderCacheMachine, stale_freed_failure(), "native:enc-stale-freed")
    assert text == GOLDEN.read_text(), "emitted reproducer changed; if on purpose, " \
        f"regenerate {GOLDEN} from render() and review the diff"


def test_same_failure_twice_writes_one_file(tmp_path):
    failure = stale_freed_failure()
    first = write_reproducer(EncoderCacheMachine, failure, "native:enc-stale-freed", tmp_path)
    again = write_reproducer(EncoderCacheMachine, stale_freed_failure(),
                             "native:enc-stale-freed", tmp_path)
    assert first == again
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]   # no temp files left
    compile(first.read_text(), str(first), "exec")
