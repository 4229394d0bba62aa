"""What every backend reads of a job folder (``backends.base``), which job code writes."""
import tracemalloc

from dlsched.backends.base import OUTPUT_TAIL_BYTES, output_tail


def test_a_failures_last_output_line_is_read_from_the_outputs_end_only(tmp_path):
    """A failed job's error ends with its output's last line: the whole output.log was read into the service's
    memory for it, and a job's output may be gigabytes (a sparse 256 MiB file here: what is read is counted)."""
    with open(tmp_path / "output.log", "wb") as f:
        f.write(b"first line\n")
        f.truncate(256 << 20)
        f.seek(0, 2)
        f.write(b"\nTraceback ...\nValueError: sample 3 is poisoned\n\n")
    tracemalloc.start()
    try:
        tail = output_tail(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tail == ": ValueError: sample 3 is poisoned"
    assert peak < 8 * OUTPUT_TAIL_BYTES
    assert output_tail(tmp_path / "none") == ""

