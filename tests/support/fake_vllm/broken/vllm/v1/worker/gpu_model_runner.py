"""Stand-in for 0.10's vllm.v1.worker.gpu_model_runner: execute_model runs the whole step."""

from stand_in_timing import sampled_tokens, work

from vllm.v1.sample.rejection_sampler import RejectionSampler
from vllm.v1.spec_decode.eagle import EagleProposer


class GPUModelRunner:
    def __init__(self):
        self.drafter = EagleProposer()
        self.rejection_sampler = RejectionSampler()

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        work("forward")
        if scheduler_output.scheduled_spec_decode_tokens:
            self.rejection_sampler("metadata", None, "target_logits", "bonus", "sampling")
        output = sampled_tokens(scheduler_output)
        work("bookkeeping")
        self.drafter.propose("ids", "positions", "hidden", "next", "attn", "sampling")
        return output
