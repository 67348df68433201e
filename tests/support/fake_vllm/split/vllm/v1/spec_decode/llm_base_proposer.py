"""Stand-in for 0.2x's vllm.v1.spec_decode.llm_base_proposer."""

from stand_in_timing import work


class SpecDecodeBaseProposer:
    def propose(
        self,
        target_token_ids,
        target_positions,
        target_hidden_states,
        next_token_ids,
        token_indices_to_sample,
        common_attn_metadata,
        sampling_metadata,
    ):
        work("draft")
        return "draft_token_ids"
