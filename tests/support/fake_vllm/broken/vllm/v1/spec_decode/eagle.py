"""Stand-in for 0.10's vllm.v1.spec_decode.eagle: propose defined on EagleProposer."""

from stand_in_timing import work


class EagleProposer:
    def propose(
        self,
        target_token_ids,
        target_positions,
        target_hidden_states,
        next_token_ids,
        common_attn_metadata,
        sampling_metadata,
    ):
        work("draft")
        return "draft_token_ids"
