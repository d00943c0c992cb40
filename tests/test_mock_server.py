"""The scripted server's own lateness, which tests use to tell its stalls from the harness's."""

from __future__ import annotations

import asyncio
import time

from quantbench.mock_server import LAG_TICK_S, MockServer, Script


def test_the_server_reports_how_late_its_own_loop_woke() -> None:
    server = MockServer(Script(), log=None)

    async def stall_once() -> None:
        watcher = asyncio.create_task(server.watch_loop_lag())
        await asyncio.sleep(3 * LAG_TICK_S)
        calm = server.loop_lag_max_s
        time.sleep(0.08)  # the loop held, as when the machine does not run the process
        await asyncio.sleep(3 * LAG_TICK_S)
        watcher.cancel()
        assert calm < 0.05
        assert 0.06 <= server.loop_lag_max_s < 0.5

    asyncio.run(stall_once())
