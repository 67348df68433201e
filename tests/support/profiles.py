"""The fast simulator profile the experiment tests (CLI sweeps and the console's Experiments
screen) launch, as specmon.toml text: ``.format(server_port=..., time_scale=...)``."""

SIMBENCH_PROFILE_TOML = """
[profiles.simbench]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "sim/Kimi-K2.5"
draft_model_path = "/models/kimi-k2.5-eagle3"
tp = 8
port = {server_port}
mem_fraction_static = 0.88
extra_args = ["--disable-custom-all-reduce", "--enable-metrics", "--decode-log-interval", "8"]
probe = true
gpu_agent = "none"
stop_grace_s = 5.0

[profiles.simbench.speculative]
algorithm = "EAGLE3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[profiles.simbench.env]
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = "1"
SPECMON_SIM_TIME_SCALE = "{time_scale}"
SPECMON_SIM_SHARDS = "8"
"""
