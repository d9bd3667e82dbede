"""reaper.asyncio against hostile trees: terminate, kill, cancellation and a timeout end the
whole tree; the streams are asyncio's own."""

import asyncio
import signal

import pytest

import reaper.asyncio as ra


def run(coro):
    return asyncio.run(coro)


async def ready(tree, *roles):
    await asyncio.get_running_loop().run_in_executor(None, lambda: tree.wait_ready(*roles))


def test_pipes_and_communicate():
    async def main():
        p = await ra.create_subprocess_exec("sh", "-c", "read x; echo got $x; echo e >&2; exit 5",
                                            stdin=ra.PIPE, stdout=ra.PIPE, stderr=ra.PIPE)
        out, err = await p.communicate(b"hi\n")
        return p.returncode, out, err, p.outcome.stop_reason
    assert run(main()) == (5, b"got hi\n", b"e\n", "exited")


def test_terminate_stops_the_setsid_grandchild(tree):
    async def main():
        p = await ra.create_subprocess_exec(*tree.argv("setsid-grandchild"), grace=0.3)
        await ready(tree, "grandchild")
        p.terminate()
        return await p.wait(), p.outcome
    code, outcome = run(main())
    assert code == -signal.SIGTERM and outcome.stop_reason == "cancel" and not outcome.survivors
    tree.assert_gone()


def test_kill_ends_the_daemon(tree):
    async def main():
        p = await ra.create_subprocess_exec(*tree.argv("daemon"))
        await ready(tree, "daemon")
        p.kill()
        return await p.wait()
    assert run(main()) == -signal.SIGKILL
    tree.assert_gone()


def test_cancelled_wait_kills_the_fork_storm(tree):
    async def main():
        p = await ra.create_subprocess_exec(*tree.argv("fork-storm", "200", "--ready-at", "20"))
        await ready(tree, "storm")
        task = asyncio.ensure_future(p.wait())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await p.wait()
    assert run(main()) == -signal.SIGKILL
    tree.assert_gone()


def test_wait_for_timeout_kills_the_pipe_holder(tree):
    async def main():
        p = await ra.create_subprocess_exec(*tree.argv("hold-stdout", "--leader-stays"),
                                            stdout=ra.PIPE)
        await ready(tree, "holder")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(p.communicate(), 0.2)
        return await p.wait()
    assert run(main()) == -signal.SIGKILL
    tree.assert_gone()


def test_async_with_stops_the_tree(tree):
    async def main():
        async with await ra.create_subprocess_exec(*tree.argv("setsid-grandchild"),
                                                   grace=0.3) as p:
            await ready(tree, "grandchild")
        return p.outcome
    assert run(main()).stop_reason == "cancel"
    tree.assert_gone()


def test_gc_of_the_process_kills_the_tree(tree):
    async def main():
        p = await ra.create_subprocess_exec(*tree.argv("daemon"))
        await ready(tree, "daemon")
        del p
        import gc
        gc.collect()
    run(main())
    tree.assert_gone()
