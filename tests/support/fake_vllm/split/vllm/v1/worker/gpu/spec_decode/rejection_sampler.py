"""Stand-in for 0.33's V2 rejection sampler: a plain class called through __call__."""

from stand_in_timing import work


class RejectionSampler:
    def __call__(self, logits, input_batch, draft_logits, invalid_drafts):
        work("reject")
        return "sampler_output"
