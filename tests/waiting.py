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
