from dlsched.torch.sync_cadence import NOISE_FIRST, SyncCadence


def test_the_first_sync_steps_all_measure_then_the_clock_spaces_them():
    cadence = SyncCadence()
    cadence.measures()  # a measured step has just begun: the clock alone would wait NOISE_S for the next
    assert cadence.plan(None, measured=0)[1] == 1.0
    assert cadence.plan(None, measured=NOISE_FIRST - 1)[1] == 1.0
    assert cadence.plan(None, measured=NOISE_FIRST)[1] == 0.0


def test_noise_every_measures_each_sync_step_it_names():
    cadence = SyncCadence()
    cadence.measures()
    assert cadence.plan(3, measured=NOISE_FIRST) == (3, 1.0)


def test_the_first_sync_step_names_the_next_step_until_a_step_is_timed():
    """The first sync step plans before its own step time is observed: it named the step 16 ahead (MAX_SYNC_GAP),
    so a job of 3 s steps read no stop flag and measured no noise for its first 48 s."""
    cadence = SyncCadence()
    assert cadence.gap(None) == 1
    cadence.observe(3.0)
    assert cadence.gap(None) == 1
    cadence = SyncCadence()
    cadence.observe(0.001)
    assert cadence.gap(None) == 16
