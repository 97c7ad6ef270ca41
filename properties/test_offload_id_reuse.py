"""The catalogue's ``offload-id-reuse`` (``docs/specs/offload-engine.md``, the seed's bug) end to
end, and why residue is not a catalogue entry of its own.

The catalogued switch ``offload-id-reuse`` (deallocate keeps the decode tracking) is caught by
the machine at the first deallocate of a decoded sequence, as a leaked tracking key, before it
can do harm. The tests here show the harm itself: with the state checks off, the machine still
finds it through attention reads, once through a reused handle and once through a preempt
(same root cause, same switch: a preempted sequence keeps its object, hence its ``id()``); and
real CPython ``id()`` reuse produces the same garbled read.

Residue: dbuf, the ring slots and freed CPU blocks are never cleared, by design. That is
harmless while decode starts are right, so no switch re-introduces it and the catalogue (whose
entries must each be caught on their own) does not list it. ``zero_on_deallocate`` clears all
of it at every deallocate: the machine passes with it on and off, and with the id-reuse bug it
only turns the foreign row into a zero row, still caught.
"""

from __future__ import annotations

from hypothesis import Phase, settings

from properties.offload_engine_machine import OffloadEngineMachine
from properties.run import run_machine
from sim.targets import make

SPEC_BUG1_CALLS = 9     # A: add, prefill, 3 decodes, finish; B: add, prefill, decode


def budget(examples: int) -> settings:
    return settings(settings.get_profile("ci"), max_examples=examples,
                    phases=[Phase.explicit, Phase.generate])


class ReadsOnly(OffloadEngineMachine):
    """Only attention reads are compared: what a user of the engine would notice."""

    CHECK_TRACKING_KEYS = False
    CHECK_STATE = False


class ReadsOnlyNoPreempt(ReadsOnly):
    preempt = None          # the rule is gone: a stale start can only come from a reused id


class ReadsOnlyNoReuse(ReadsOnly):
    reuse_id = None         # no id reuse: a stale start can only come from a preempt


def _steps(failure) -> str:
    return "\n".join(f"{s.call}  # {s.comment}" for s in failure.trace.steps)


def test_reused_id_garbles_the_next_request_reads():
    result = run_machine(ReadsOnlyNoPreempt, "native:offload-id-reuse", budget(200))
    failure = result.failure
    assert failure is not None and failure.property == "attention-reads-agree", failure
    assert "reused from a finished sequence" in _steps(failure), _steps(failure)
    assert failure.calls <= SPEC_BUG1_CALLS, _steps(failure)


def test_preempt_garbles_the_re_prefilled_reads_without_id_reuse():
    result = run_machine(ReadsOnlyNoReuse, "native:offload-id-reuse", budget(200))
    failure = result.failure
    assert failure is not None and failure.property == "attention-reads-agree", failure
    assert "preempted" in _steps(failure) and "reused" not in _steps(failure), _steps(failure)
    assert failure.calls <= SPEC_BUG1_CALLS, _steps(failure)


def _spec_scenario(eng, handles: tuple[int | None, int | None]) -> list[int]:
    """``offload-id-reuse``: A prompt 2 decodes t=2..4 and finishes; B (prompt 6) decodes t=6."""
    eng.add_request(0, prompt_len=2, handle=handles[0])
    eng.prefill(0, num_chunks=1)
    for _ in range(3):
        eng.decode(0)
    eng.finish(0)
    eng.add_request(1, prompt_len=6, handle=handles[1])
    eng.prefill(1, num_chunks=2)
    return eng.decode(1)[0]


def _engine(target: str, **options):
    return make(target, "offload_engine", block_size=4, num_slots=2, num_layers=1,
                num_cpu_blocks=4, **options)


B_READ = [100001 + p for p in range(7)]          # s1's own rows for positions 0..6
A4 = 5                                           # s0's row for position 4


def test_real_cpython_id_reuse_leaks_decode_tracking():
    # handle=None: the engine keys tracking by id(seq), as nano-vllm did. CPython gives the
    # second Sequence the freed memory, hence the id, of the first.
    eng = _engine("native:offload-id-reuse")
    eng.add_request(9, prompt_len=1)
    first = eng.handle_of(9)
    eng.finish(9)
    eng.add_request(8, prompt_len=1)
    assert eng.handle_of(8) == first, "CPython did not reuse the id; the hazard needs it"

    read = _spec_scenario(_engine("native:offload-id-reuse"), (None, None))
    assert A4 in read and read[-1] == B_READ[-1] and read != B_READ, read
    assert _spec_scenario(_engine("native"), (None, None)) == B_READ


def test_residue_is_harmless_alone_and_zeroing_fixes_nothing():
    assert _spec_scenario(_engine("native"), (0, 0)) == B_READ
    assert _spec_scenario(_engine("native", zero_on_deallocate=True), (0, 0)) == B_READ
    leaked = _spec_scenario(_engine("native:offload-id-reuse"), (0, 0))
    assert A4 in leaked                                         # a foreign row
    zeroed = _spec_scenario(_engine("native:offload-id-reuse", zero_on_deallocate=True), (0, 0))
    assert A4 not in zeroed and 0 in zeroed and zeroed != B_READ   # a zero row: still wrong


class Zeroing(OffloadEngineMachine):
    TARGET_OPTIONS = {"zero_on_deallocate": True}


class ZeroingReadsOnly(ReadsOnly):
    TARGET_OPTIONS = {"zero_on_deallocate": True}


def test_machine_passes_with_and_without_zeroing():
    assert run_machine(Zeroing, "native", budget(60)).failure is None


def test_machine_still_catches_id_reuse_when_buffers_are_zeroed():
    failure = run_machine(ZeroingReadsOnly, "native:offload-id-reuse", budget(200)).failure
    assert failure is not None and failure.property == "attention-reads-agree"
    assert "zero row" in failure.message, failure.message
