"""What is shipped to the host and run there: the helper, its bootstrap and the GPU agent.

Standard library only, and never an import of specmon (tests/unit/meta/test_layers.py): each file
travels alone, as its own source text. The paths below are how the sending side finds them.
"""

from pathlib import Path

_HERE = Path(__file__).resolve().parent
HELPER_SOURCE = _HERE / "helper.py"
BOOTSTRAP_SOURCE = _HERE / "host_bootstrap.py"
AGENT_SOURCE = _HERE / "agent.py"
