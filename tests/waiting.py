"""One bounded wait for tests that watch real processes: poll until a condition holds, fail loudly otherwise."""
import time


def wait_until(pred, timeout: float = 30.0, what: str = "condition", every: float = 0.05):
    """The first truthy value of ``pred()`` within ``timeout`` seconds; AssertionError naming ``what`` if none."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def process_alive(pid: int) -> bool:
    """Running: a zombie waiting for its reaper counts as dead, and so does a pid gone between two looks."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def blocked_on_fifo(fifo, call, timeout: float = 30.0) -> tuple[bool, list]:
    """Whether ``call()`` was still running after ``timeout`` seconds with the FIFO ``fifo`` (made by the test, given
    no writer), and its answer in a list (empty if it raised). A call still blocked is let go (a writer's open and
    close gives it its end of file) before this returns."""
    import os
    import threading

    answers = []
    worker = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    worker.start()
    worker.join(timeout)
    blocked = worker.is_alive()
    if blocked:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout)
    return blocked, answers
