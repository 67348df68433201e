"""A reattach replays its window of the log as a summary (issue 14 item 5): every state event of
the window, but only the last log lines and samples; and the run's load time shows from its run
record when the replay no longer holds the start-up lines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import kill_everything_under, local_session, sim_profiles

from specmon.backends import DEFAULT_BACKEND, get_backend
from specmon.model.events import Decode, Dropped, LoadBegin, LogLine, Ready, ServerError
from specmon.session.log_follower import LogFollower


def decode_line(n: int, gen: float) -> str:
    return (
        f"[2026-02-17 09:00:{n % 60:02d} DP{n % 8} TP{n % 8}] Decode batch, #running-req: 4, "
        f"#token: {n}, token usage: 0.12, accept len: 2.50, accept rate: 0.61, "
        f"cuda graph: True, gen throughput (token/s): {gen:.2f}, #queue-req: 0\n"
    )


def test_a_replay_gives_every_state_event_but_only_the_last_lines_and_samples():
    head = "[2026-02-17 08:00:00 TP0] Load weight begin. avail mem=70.00 GB\n"
    middle = "[2026-02-17 08:30:00 TP0] RuntimeError: CUDA error: an illegal memory access\n"
    ready = "[2026-02-17 08:01:00] The server is fired up and ready to roll!\n"
    text = (
        head
        + ready
        + "".join(decode_line(n, 100.0 + n) for n in range(300))
        + middle
        + "".join(decode_line(n, 500.0 + n) for n in range(300, 600))
        + "the last line, unterminated"
    )
    data = text.encode()
    parser = get_backend(DEFAULT_BACKEND).new_log_parser()
    log = LogFollower.reattached(
        parser, len(data), replay_bytes=1 << 20, summary=True, lines=3, samples=2
    )
    events = []
    for start in range(0, len(data), 4099):  # chunks that cut lines anywhere
        events += log.feed_log(start, data[start : start + 4099])
    assert log.replay_finished()
    kinds = [type(e) for e in events]
    assert LoadBegin in kinds and Ready in kinds and ServerError in kinds
    decodes = [e for e in events if isinstance(e, Decode)]
    assert [d.gen_throughput for d in decodes] == [1098.0, 1099.0]
    # what was left out is counted where it was: 600 of 603 lines, 598 of 600 samples
    assert [e.count for e in events if isinstance(e, Dropped)] == [600 + 598]
    assert kinds.index(Dropped) < kinds.index(LogLine)
    lines = [e for e in events if isinstance(e, LogLine)]
    complete = text.split("\n")[:-1]
    assert [line.text for line in lines] == complete[-3:]
    assert [line.offset for line in lines] == [data.index(line.text.encode()) for line in lines]
    assert list(log.recent)[-3:] == complete[-3:]
    # the live tail goes on from the held partial line, at the right offset
    more = b" now ended\n" + decode_line(600, 1234.5).encode()
    after = log.feed_log(len(data), more)
    live = [e for e in after if isinstance(e, LogLine)]
    assert [line.text for line in live] == [
        "the last line, unterminated now ended",
        decode_line(600, 1234.5).rstrip("\n"),
    ]
    assert live[0].offset == text.rindex("the last line")
    assert live[1].offset == len(data) + len(b" now ended\n")
    assert [e.gen_throughput for e in after if isinstance(e, Decode)] == [1234.5]


@pytest.mark.parametrize("summary", [True, False])
def test_a_short_replay_or_one_for_a_lossless_reader_gives_every_line(summary: bool):
    count = 10 if summary else 6000  # not a summary: every line, however many
    text = "".join(decode_line(n, 100.0 + n) for n in range(count))
    data = text.encode()
    parser = get_backend(DEFAULT_BACKEND).new_log_parser()
    log = LogFollower.reattached(parser, len(data), replay_bytes=4 << 20, summary=summary)
    events = log.feed_log(0, data)
    assert [e.text for e in events if isinstance(e, LogLine)] == text.split("\n")[:-1]
    assert len([e for e in events if isinstance(e, Decode)]) == count
    assert not [e for e in events if isinstance(e, Dropped)]


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


async def test_reattach_to_a_grown_log_is_live_with_the_last_throughput_and_the_load_time(
    state_dir: Path,
) -> None:
    """The log grows past the replay window (start-up lines out of it), through the helper's
    compressed chunks, and only a lossy reader listens (as the console does): the newest
    decode, the tail of the log and the load time all show, the older lines as one marker."""
    profiles = sim_profiles()
    first = local_session(state_dir, profiles, gpu_agent="none")
    await first.start()
    try:
        run_id = await first.launch("fast")
        # Ready seen in the log, live (the health endpoint can tell first under load: the run
        # is then ready, but its load time comes with the line).
        await first.wait_for(
            lambda s: s.run_state == "failed" or s.loading.ready_at is not None, 60
        )
    finally:
        await first.close()
    log_path = state_dir / "runs" / run_id / "server.log"
    block = "".join(decode_line(n, 100.0 + n % 100) for n in range(8000)).encode()
    with log_path.open("ab") as out:
        out.write(block + decode_line(1, 4321.5).encode())
    size = log_path.stat().st_size
    session = local_session(state_dir, profiles, gpu_agent="none", replay_log_bytes=3 << 19)
    queue = session.bus.subscribe(lossy=True)
    await session.start()
    try:
        store = await session.wait_for(
            lambda s: s.last_decode is not None and s.last_decode.gen_throughput == 4321.5, 30
        )
        events = []
        while not queue.empty():
            events.append(queue.get_nowait()[1])
        run = session.current_run
        assert run is not None and run.ready_at is not None and not run.ready_late
        assert store.loading.started_at == pytest.approx(run.started_at)
        assert store.loading.ready_at == pytest.approx(run.ready_at)
        lines = [e for e in events if isinstance(e, LogLine) and e.offset < size]
        assert len(lines) == 5000  # of the ~7,300 in the window
        assert [e for e in events if isinstance(e, Dropped) and e.count > 2000]
        text = log_path.read_bytes()
        for line in (lines[0], lines[-1]):
            assert text[line.offset : line.offset + len(line.text)] == line.text.encode()
        assert lines[-1].offset + len(lines[-1].text) + 1 == size
        # the store holds the replayed tail (lines the live server wrote since, e.g. access
        # lines of the pollers, may have pushed the oldest few out)
        kept = [e for e in store.log if e.offset < size]
        assert len(kept) >= len(lines) - 100 and kept == lines[len(lines) - len(kept) :]
    finally:
        session.bus.unsubscribe(queue)
        await session.close()
