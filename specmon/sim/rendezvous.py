"""Where the simulated nodes of one multi-node launch meet: over TCP at ``--dist-init-addr``.

SGLang's ``--nnodes N --node-rank i --dist-init-addr HOST:PORT`` makes every TP rank join one
torch.distributed group whose store listens on node 0 at HOST:PORT. The simulator does the
same with real sockets: node 0 listens and waits for the other nodes; each other node connects
(retrying until the timeout, as torch's store client does). The connections stay open for the
life of the run, so when any node's process dies its peers see the socket close, as NCCL's
watchdog sees a peer vanish, and end themselves.

What is printed when it fails is torch's text (facts from public logs of real runs): the store
on node 0 gives up with ``DistStoreError: Timed out after {timeout + 1} seconds waiting for
clients. {joined}/{world} clients joined.`` (counted in ranks: one per GPU), a node that cannot
reach node 0 with ``DistNetworkError: The client socket has timed out after {ms}ms while trying
to connect to (HOST, PORT).``, and a rank whose peer died with ``NCCL error: remote process
exited or there was a network error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_TIMEOUT_S = 600.0  # torch.distributed's store wait, before the simulator's time scale
TIMEOUT_ENV = "SPECMON_SIM_DIST_TIMEOUT"  # seconds, not scaled (tests use a few)
PEER_LOST_ENV = "SPECMON_SIM_PEER_LOST_S"  # seconds a node outlives a dead peer (default 0)
RETRY_S = 0.2  # how often a node that found no listener tries again
PEER_LOST = "RuntimeError: NCCL error: remote process exited or there was a network error"


class RendezvousError(Exception):
    """The nodes did not all meet: ``text`` is what torch prints (a traceback's last line)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def parse_init_addr(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError when it is not one."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"--dist-init-addr {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port_text)


@dataclass
class Rendezvous:
    """One node's side of the meeting, and the connections that carry its liveness after."""

    nnodes: int
    node_rank: int
    host: str
    port: int
    ranks_per_node: int
    timeout_s: float = DEFAULT_TIMEOUT_S
    _peers: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _watchers: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def world(self) -> int:
        return self.nnodes * self.ranks_per_node

    async def meet(self) -> None:
        """Return when every node is there; RendezvousError after the timeout."""
        if self.nnodes <= 1:
            return
        if self.node_rank == 0:
            await self._listen()
        else:
            await self._join()

    async def _listen(self) -> None:
        joined: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.TimeoutError, OSError, ValueError):
                line = await asyncio.wait_for(reader.readline(), 5.0)
                if line.startswith(b"node "):
                    await joined.put((reader, writer))
                    return
            writer.close()

        self._server = await asyncio.start_server(on_client, self.host, self.port)
        deadline = time.monotonic() + self.timeout_s
        while len(self._peers) < self.nnodes - 1:
            left = deadline - time.monotonic()
            try:
                self._peers.append(await asyncio.wait_for(joined.get(), max(0.0, left)))
            except asyncio.TimeoutError:
                clients = (len(self._peers) + 1) * self.ranks_per_node
                raise RendezvousError(
                    "torch.distributed.DistStoreError: Timed out after "
                    f"{int(self.timeout_s) + 1} seconds waiting for clients. "
                    f"{clients}/{self.world} clients joined."
                ) from None
        self._server.close()  # the group is complete: no later node may join it
        for _, writer in self._peers:
            writer.write(b"go\n")
            await writer.drain()

    async def _join(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port),
                    max(0.1, deadline - time.monotonic()),
                )
                writer.write(f"node {self.node_rank}\n".encode())
                await writer.drain()
                left = max(0.1, deadline - time.monotonic())
                if await asyncio.wait_for(reader.readline(), left) == b"go\n":
                    self._peers.append((reader, writer))
                    return
                writer.close()
            except (OSError, asyncio.TimeoutError):
                pass
            if time.monotonic() >= deadline:
                raise RendezvousError(
                    "torch.distributed.DistNetworkError: The client socket has timed out after "
                    f"{int(self.timeout_s * 1000)}ms while trying to connect to "
                    f"({self.host}, {self.port})."
                )
            await asyncio.sleep(RETRY_S)

    def watch(self, on_peer_lost: Callable[[], None]) -> None:
        """Call ``on_peer_lost`` once when any other node's connection closes."""
        fired = False

        async def read_until_closed(reader: asyncio.StreamReader) -> None:
            nonlocal fired
            with contextlib.suppress(OSError):
                while await reader.read(4096):
                    pass
            if not fired:
                fired = True
                on_peer_lost()

        loop = asyncio.get_running_loop()
        self._watchers = [loop.create_task(read_until_closed(r)) for r, _ in self._peers]
