from vllm._version import __version__ as __version__
