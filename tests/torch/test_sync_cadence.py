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
