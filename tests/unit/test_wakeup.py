"""Waiters: woken by a notification from their own loop or another thread, or time out."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from queuelog.wakeup import Wakeup


def test_a_notification_on_the_waiters_loop_wakes_it_without_a_thread_hop() -> None:
    async def main() -> tuple[bool, int]:
        wakeup = Wakeup()
        loop = asyncio.get_running_loop()
        hops = 0
        threadsafe = loop.call_soon_threadsafe

        def counting(*args: object) -> object:
            nonlocal hops
            hops += 1
            return threadsafe(*args)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        with wakeup.waiter() as waiter:
            loop.call_soon(wakeup.notify)
            woken = await waiter.wait(5)
        return woken, hops

    assert asyncio.run(main()) == (True, 0)


def test_a_notification_from_another_thread_wakes_the_waiter() -> None:
    async def main() -> tuple[bool, float]:
        wakeup = Wakeup()
        with wakeup.waiter() as waiter:
            threading.Timer(0.05, wakeup.notify).start()
            started = time.monotonic()
            woken = await waiter.wait(5)
        return woken, time.monotonic() - started

    woken, waited = asyncio.run(main())
    assert woken and waited < 4


def test_a_notification_before_the_wait_is_not_lost() -> None:
    async def main() -> bool:
        wakeup = Wakeup()
        with wakeup.waiter() as waiter:
            wakeup.notify()  # between registering and waiting (an empty claim, say)
            return await waiter.wait(5)

    assert asyncio.run(main())


def test_a_wait_without_notification_times_out_and_leaves_nothing_behind() -> None:
    async def main() -> tuple[bool, int]:
        wakeup = Wakeup()
        with wakeup.waiter() as waiter:
            woken = await waiter.wait(0.05)
        wakeup.notify()  # no waiter left to wake
        return woken, len(asyncio.all_tasks())

    assert asyncio.run(main()) == (False, 1)


def test_a_cancelled_wait_is_cancelled_and_a_later_notification_is_harmless() -> None:
    async def main() -> None:
        wakeup = Wakeup()
        with wakeup.waiter() as waiter:
            task = asyncio.ensure_future(waiter.wait(5))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            wakeup.notify()
            assert await waiter.wait(0.01)  # notified since it was registered

    asyncio.run(main())


def test_a_wait_ends_when_its_until_future_is_done() -> None:
    async def main() -> tuple[bool, float]:
        wakeup = Wakeup()
        with wakeup.waiter() as waiter:
            gone = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.05, gone.set_result, None)
            started = time.monotonic()
            woken = await waiter.wait(5, until=gone)
        return woken, time.monotonic() - started

    woken, waited = asyncio.run(main())
    assert not woken and waited < 4
