"""Stand-in for 0.33's V2 EagleSpeculator (imported lazily by the model runner)."""

from stand_in_timing import work


class EagleSpeculator:
    def propose(
        self,
        input_batch,
        attn_metadata,
        slot_mappings,
        last_hidden_states,
        aux_hidden_states,
        num_sampled,
        num_rejected,
        last_sampled,
        next_prefill_tokens,
        temperature,
        seeds,
    ):
        work("draft")
        return "draft_tokens"
