"""Stand-in for 0.33's V2 vllm.v1.worker.gpu.model_runner (the default for EAGLE-3)."""

from stand_in_timing import AsyncModelRunnerOutput, sampled_tokens, work

from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler


class GPUModelRunner:
    def __init__(self):
        from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator

        self.speculator = EagleSpeculator()
        self.rejection_sampler = RejectionSampler()
        self.execute_model_state = None

    def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False):
        work("forward")
        self.execute_model_state = scheduler_output
        return None

    def sample_tokens(self, grammar_output):
        scheduler_output, self.execute_model_state = self.execute_model_state, None
        if scheduler_output.scheduled_spec_decode_tokens:
            self.rejection_sampler("logits", "input_batch", None, None)
        output = sampled_tokens(scheduler_output)
        work("bookkeeping")
        self.speculator.propose(*range(11))
        return AsyncModelRunnerOutput(output)
