"""Stand-in for an SGLang version the probe does not know: verify has another name."""

from __future__ import annotations

from stand_in_timing import Batch, work


class EAGLEWorker:
    def __init__(self, speculative_num_draft_tokens: int = 4) -> None:
        self.speculative_num_draft_tokens = speculative_num_draft_tokens

    def forward_batch_generation(self, batch: Batch) -> tuple[str, int]:
        self.draft(batch)
        self.verify_tokens(batch)
        self.forward_draft_extend_after_decode(batch)
        return ("decode", sum(batch.accepted_per_request))

    def draft(self, batch: Batch) -> str:
        work("draft")
        return "verify-input"

    def verify_tokens(self, batch: Batch) -> None:
        work("verify")

    def forward_draft_extend_after_decode(self, batch: Batch) -> None:
        work("extend")
