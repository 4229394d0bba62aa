"""train/polling.py: a wait polls fast at first and slows to its cap."""
from dlsched.train.polling import Backoff


def test_the_delay_grows_from_the_first_to_the_cap_and_stays_there():
    b = Backoff(first_s=0.001, cap_s=0.004, factor=2.0)
    delays = []
    for _ in range(5):
        delays.append(b.delay)
        b.sleep()
    assert delays == [0.001, 0.002, 0.004, 0.004, 0.004]
