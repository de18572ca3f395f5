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


def test_coming_wakes_the_longest_waiting_claimer_of_each_jobs_type_on_this_loop() -> None:
    async def main() -> list[str]:
        wakeup = Wakeup()
        names = ("emails-first", "any-first", "emails-second", "images", "any-second")
        types = (["email"], None, ["email"], ["image"], None)
        # Registered in another order than they began to wait (a claim that waits
        # again registers anew, with the time it arrived).
        order = (4, 2, 0, 3, 1)
        waiters = {names[i]: wakeup.waiter(types[i], since=100.0 + i) for i in order}
        tasks = {name: asyncio.ensure_future(waiters[name].wait(0.2)) for name in names}
        await asyncio.sleep(0)
        wakeup.coming(["email", "email", "report"])
        await asyncio.sleep(0)
        woken = [name for name, task in tasks.items() if task.done() and task.result()]
        await asyncio.gather(*tasks.values())
        for waiter in waiters.values():
            waiter.__exit__()
        return woken

    # Job by job, the longest-waiting claimer that may take it and is not woken yet:
    # the second email goes to "any-first", which has waited longer than "emails-second".
    assert asyncio.run(main()) == ["emails-first", "any-first", "any-second"]


def test_coming_leaves_claimers_on_other_loops_and_already_woken_ones_alone() -> None:
    wakeup = Wakeup()
    registered = threading.Event()
    release = threading.Event()
    elsewhere: list[bool] = []

    async def other_loop() -> None:
        with wakeup.waiter() as waiter:
            registered.set()
            elsewhere.append(await waiter.wait(0.3))
            release.wait(5)

    thread = threading.Thread(target=asyncio.run, args=(other_loop(),))
    thread.start()
    assert registered.wait(5)

    async def main() -> tuple[bool, bool]:
        with wakeup.waiter() as first, wakeup.waiter() as second:
            first._wake()  # woken already (by a notification, say)
            wakeup.coming(["noop"])
            return await first.wait(0.3), await second.wait(0.3)

    assert asyncio.run(main()) == (True, True)
    release.set()
    thread.join(5)
    assert elsewhere == [False]
