from vllm.version import __version__ as __version__
