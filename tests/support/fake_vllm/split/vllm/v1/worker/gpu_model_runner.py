"""Stand-in for 0.33's V1 vllm.v1.worker.gpu_model_runner: execute_model keeps its state,
sample_tokens samples, rejects and proposes. As in 0.32 and 0.33 (not 0.22), the rejection
sampler runs on every step once speculative decoding is configured, a prefill with no draft
tokens included (``use_spec_decode = self.speculative_config is not None``)."""

from stand_in_timing import AsyncModelRunnerOutput, sampled_tokens, work

from vllm.v1.sample.rejection_sampler import RejectionSampler
from vllm.v1.spec_decode.eagle import EagleProposer


class GPUModelRunner:
    def __init__(self, async_output=False):
        self.drafter = EagleProposer()
        self.rejection_sampler = RejectionSampler()
        self.async_output = async_output
        self.execute_model_state = None

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        work("forward")
        self.execute_model_state = scheduler_output
        return None

    def sample_tokens(self, grammar_output):
        scheduler_output, self.execute_model_state = self.execute_model_state, None
        self.rejection_sampler("metadata", None, "target_logits", "bonus", "sampling")
        output = sampled_tokens(scheduler_output)
        self.drafter.propose("ids", "positions", "hidden", "next", "indices", "attn", "sampling")
        work("bookkeeping")
        return AsyncModelRunnerOutput(output) if self.async_output else output
