"""specmon: a terminal console for speculative-decoding LLM servers on remote GPU hosts."""

__version__ = "0.1.0"
