from tests.sim.helpers import jcts, job


def test_srtf_oracle_hand_computed():
    # Remaining times at t=10: C 10, B 20, A 100 -> C and B run, A (2 GPUs) waits until both are gone.
    jobs = [job("A", 0, 2, 100), job("B", 0, 1, 20), job("C", 5, 1, 10)]
    assert jcts(jobs, "srtf") == {"C": 15, "B": 30, "A": 130}


def test_srtf_preempts_for_a_shorter_arrival():
    # 1 GPU. A (50 s) runs from 10; B (10 s) arrives at 15, is seen at 20 and preempts A (A has 40 s left).
    jobs = [job("A", 0, 1, 50), job("B", 15, 1, 10)]
    assert jcts(jobs, "srtf", gpus_per_node=1) == {"B": 15, "A": 70}


def test_srtf_with_predicted_durations_is_seeded():
    jobs = [job(f"j{i}", i, 1, 10 + 7 * i) for i in range(8)]
    a = jcts(jobs, "srtf", remaining="noise:1.0", seed=3)
    b = jcts(jobs, "srtf", remaining="noise:1.0", seed=3)
    oracle = jcts(jobs, "srtf")
    assert a == b and a != oracle   # a large error reorders jobs, deterministically
