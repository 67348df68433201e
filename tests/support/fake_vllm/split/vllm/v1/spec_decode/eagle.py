"""Stand-in for 0.2x's vllm.v1.spec_decode.eagle: propose is inherited."""

from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer


class EagleProposer(SpecDecodeBaseProposer):
    pass
