"""`specmon connect http://HOST:PORT`: the console on a server reached by its URL alone (the
simulator's vLLM personality as a plain process): read-only, its header naming the URL and
"HTTP only", throughput, acceptance and acceptance by position filled from ``/metrics``, the
GPU panel saying why it stays empty, and a host's actions refused in one line."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import httpx
from support.sim import VLLM_EAGLE3_ARGS, VLLM_READY_LINE, SimProcess, start_sim
from textual.widgets import Static

from specmon.session.options import SessionOptions
from specmon.session.url import UrlController, parse_url_target
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.gpus import GpuPanel
from specmon.tui.widgets.header import HeaderBar

MODEL = "meta-llama/Llama-3.3-70B-Instruct"


@contextlib.contextmanager
def busy(sim: SimProcess) -> Iterator[None]:
    """Two clients sending completions until the block ends."""
    done = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            while not done.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    body = {"model": MODEL, "prompt": "hi " * 40, "max_tokens": 200}
                    http.post(sim.url("/v1/completions"), json=body)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)


def shown(app: SpecmonApp, selector: str) -> str:
    return str(app.main.query_one(selector, Static).render())


async def test_connect_url_fills_throughput_and_acceptance_read_only(tmp_path) -> None:
    with (
        start_sim(
            tmp_path / "vllm",
            module="specmon.sim.vllm",
            base_args=VLLM_EAGLE3_ARGS,
            env={"SPECMON_SIM_SHARDS": "4"},
            probe=False,
        ) as sim,
    ):
        sim.wait_for_log(VLLM_READY_LINE, 60)
        url = f"http://127.0.0.1:{sim.port}"
        controller = UrlController(
            parse_url_target(url), options=SessionOptions(health_interval_s=0.25)
        )
        app = SpecmonApp(controller, None, read_only=True)
        with busy(sim):
            async with app.run_test(size=(140, 44)) as pilot:
                store = controller.bus.store
                for _ in range(150):  # up to 15 s: two /metrics pages make the first rates
                    await pilot.pause(0.1)
                    decode = store.last_decode
                    if decode is not None and decode.gen_throughput > 0 and store.accept_len:
                        await pilot.pause(0.5)  # a redraw
                        break
                header = str(app.main.query_one(HeaderBar).render())
                assert f"{url} (HTTP only)" in header and "READ-ONLY" in header
                assert "ready" in header
                assert "tok/s" in shown(app, "#tps-stats")
                assert "accept len" in shown(app, "#accept-stats")
                assert shown(app, "#positions").startswith("acceptance by position  1 ")
                gpus = str(app.main.query_one(GpuPanel).render())
                assert "GPUs: not visible over HTTP" in gpus
                await pilot.press("r")
                await pilot.pause(0.2)
                assert app.screen is app.main
                said = [n.message for n in app._notifications]
                assert any("watched over HTTP only" in message for message in said), said
