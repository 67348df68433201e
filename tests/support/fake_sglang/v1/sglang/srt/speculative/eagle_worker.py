"""Stand-in for SGLang 0.5.9's v1 EAGLE worker: same class and method names and call order."""

from __future__ import annotations

from dataclasses import dataclass

from stand_in_timing import Batch, work


@dataclass
class EagleVerifyOutput:
    accept_length_per_req_cpu: list[int]


class EAGLEWorker:
    def __init__(self, speculative_num_draft_tokens: int = 4) -> None:
        self.speculative_num_draft_tokens = speculative_num_draft_tokens

    def forward_batch_generation(self, batch: Batch) -> tuple[str, int]:
        if batch.is_prefill:
            work("prefill")
            return ("prefill", len(batch.seq_lens))
        spec_info = self.draft(batch)
        _logits, verify_output, _worker_batch, _graph = self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        return ("decode", sum(verify_output.accept_length_per_req_cpu))

    def draft(self, batch: Batch) -> str:
        work("draft")
        return "verify-input"

    def verify(self, batch: Batch, spec_info: str) -> tuple[str, EagleVerifyOutput, str, bool]:
        work("verify")
        return ("logits", EagleVerifyOutput(list(batch.accepted_per_request)), "mwb", True)

    def forward_draft_extend_after_decode(self, batch: Batch) -> None:
        work("extend")
