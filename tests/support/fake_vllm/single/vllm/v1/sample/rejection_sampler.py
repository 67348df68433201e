"""Stand-in for vllm.v1.sample.rejection_sampler: an nn.Module-like RejectionSampler."""

from stand_in_timing import work


class RejectionSampler:
    def __call__(self, *args, **kwargs):  # nn.Module.__call__ -> forward
        return self.forward(*args, **kwargs)

    def forward(self, metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata):
        work("reject")
        return "output_token_ids"
