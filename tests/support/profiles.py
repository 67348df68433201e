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


def vllm_sim_profile_toml(name: str, server_port: int, k: int, time_scale: str) -> str:
    """The built-in demo-vllm profile (the simulator's vLLM personality, probe on) as profile
    ``name`` at ``k`` speculative tokens: no GPU agent, a stats line every second."""
    from specmon.backends import get_backend

    text = get_backend("vllm").builtin_profiles_toml.replace("demo-vllm", name)
    replacements = {
        'port = "auto"': f"port = {server_port}",
        "num_speculative_tokens = 3": f"num_speculative_tokens = {k}",
        'gpu_agent = "sim"': 'gpu_agent = "none"',
        'SPECMON_SIM_TIME_SCALE = "0.02"': f'SPECMON_SIM_TIME_SCALE = "{time_scale}"',
        'SPECMON_SIM_SHARDS = "30"': 'SPECMON_SIM_SHARDS = "4"',
    }
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return text + 'VLLM_LOG_STATS_INTERVAL = "1"\n'
