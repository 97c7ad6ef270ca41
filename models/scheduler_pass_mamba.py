"""Mamba states cached per block (vLLM's align mode): the decoder-only grant, its chunk first
chosen by what alignment promises. A state is written where a chunk ends, so a prefill chunk
(to ``P``: the prompt, or all known tokens but the last when outputs are replayed) ends (1) on
a boundary, unless it finishes the prefill or holds none and a block is wider than the budget;
(2) within the block it starts in; (3) not past the last checkpoint, the last boundary
``max(1, s)`` known tokens before the end; (4) so that every prefill finishes: where the
runway would take back all (1)-(3) admit, even with the whole budget, it keeps its end (vLLM
0.33.0 stalls: ``fixtures/reproducers/test_scheduler_pass_vllm_mamba_mtp_stall.py``). No
token: no item judged, a waiting request stops the queue. Not modelled: prefix-cache hits."""

from __future__ import annotations

from attrs import frozen

from models.scheduler_pass_grant import DecoderOnly, Grant


@frozen
class Mamba(DecoderOnly):
    block: int

    def wanted(self, model, state, tokens_left: int) -> int:
        c, w, b = state.scheduled_upto, super().wanted(model, state, tokens_left), self.block
        prefill_end = max(state.request.prompt_len, state.num_tokens - 1)
        checkpoint = (state.num_tokens - max(1, model.read_ahead)) // b * b
        admitted = [end for end in range(c + 1, c + w + 1) if c >= prefill_end or (
            end % b == 0 or end >= prefill_end or b > model.token_budget and end // b == c // b)
            and (c % b == 0 or end <= c - c % b + b) and not c < checkpoint < end]  # (1)-(3)
        return max(admitted, default=c) - c

    def grant(self, model, state, left: int, compute_left: int) -> Grant:
        if self.wanted(model, state, left) or not super().wanted(model, state, left):
            return super().grant(model, state, left, compute_left)
        return Grant(state.request, state.scheduled_upto, 0,
                     limit="stopped" if state.started_at is None else "aligned")

    def runway(self, model, state, tokens: int) -> int:
        whole = self.wanted(model, state, model.token_budget)      # rule 4: no stall
        return super().runway(model, state, tokens) or (
            0 if super().runway(model, state, whole) else tokens)
