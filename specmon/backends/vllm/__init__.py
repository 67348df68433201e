"""vLLM: its server log (parser, summary, detection) and its Prometheus ``/metrics``."""
