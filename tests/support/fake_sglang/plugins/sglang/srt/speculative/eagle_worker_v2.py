"""Stand-in for SGLang 0.5.23's v2 EAGLE worker (the only one left there)."""

from __future__ import annotations

from dataclasses import dataclass

from stand_in_timing import Batch, work


@dataclass
class GenerationBatchResult:
    accept_lens: object  # a device tensor in SGLang: the probe must not read it


class EagleDraftWorker:
    def draft(self, batch: Batch, *, with_topology: bool = False) -> str:
        work("draft")
        return "verify-input"

    def _draft_extend_for_decode(self, batch: Batch, batch_output: GenerationBatchResult) -> None:
        work("extend")


class EAGLEWorkerV2:
    def __init__(self, speculative_num_draft_tokens: int = 4) -> None:
        self.speculative_num_draft_tokens = speculative_num_draft_tokens
        self.draft_worker = EagleDraftWorker()

    def forward_batch_generation(
        self, batch: Batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None
    ) -> tuple[str, int]:
        if batch.is_prefill:
            work("prefill")
            return ("prefill", len(batch.seq_lens))
        self.draft_worker.draft(batch)
        batch_output = self.verify(batch, pp_proxy_tensors=pp_proxy_tensors)
        self.draft_worker._draft_extend_for_decode(batch, batch_output)
        return ("decode", sum(batch_output.accept_lens))

    def verify(
        self, batch: Batch, pp_proxy_tensors=None, grammar_barrier=None
    ) -> GenerationBatchResult:
        work("verify")
        return GenerationBatchResult(accept_lens=tuple(batch.accepted_per_request))
