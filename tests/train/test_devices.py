"""One GPU per worker, never shared: the pure assignment rules (no GPU needed)."""
from dlsched.train.devices import CPU, collective_backend, free_devices, job_devices, keepers, visible_devices


def test_job_devices_come_from_the_starter_or_all_local_gpus():
    assert job_devices(None, 2) == ["0", "1"]           # started by hand: every local GPU
    assert job_devices(None, 0) == []
    assert job_devices("3,5", 8) == ["3", "5"]          # the backend's grant wins over what exists
    assert job_devices("", 8) == []                     # slots only: the backend keeps the job off the GPUs
    assert job_devices("GPU-1a2b, GPU-3c4d", 2) == ["GPU-1a2b", "GPU-3c4d"]


def test_new_workers_get_the_free_devices_in_order_then_cpu():
    assert free_devices(["0", "1", "2", "3"], ["0", "2"], 3) == ["1", "3", CPU]
    assert free_devices([], [], 2) == [CPU, CPU]
    assert free_devices(["0", "1"], [CPU, "1"], 1) == ["0"]


def test_workers_whose_gpu_was_taken_away_leave_at_the_resize():
    device_of = {0: "0", 1: "1", 2: "2", 7: CPU}
    assert keepers([0, 1, 2], device_of, ["0", "2"], 3) == [0, 2]      # "1" went back to the backend
    assert keepers([0, 1, 2], device_of, ["0", "1", "2"], 2) == [0, 1]  # shrink: the first ones stay
    assert keepers([7, 0], device_of, [], 2) == [7]                    # CPU workers may always stay
    assert keepers([0, 1], device_of, ["5", "6"], 2) == []             # moved to other GPUs: nobody stays


def test_nccl_only_when_every_rank_has_a_gpu():
    assert collective_backend(["0", "1"], cuda_available=True) == "nccl"
    assert collective_backend(["0", CPU], cuda_available=True) == "gloo"
    assert collective_backend(["0", "1"], cuda_available=False) == "gloo"
    assert collective_backend([], cuda_available=True) == "gloo"


def test_a_worker_sees_its_own_gpu_first_then_its_jobs_peers():
    assert visible_devices("3", ["0", "1", "3"]) == "3,0,1"   # trains on cuda:0 = GPU 3; 0 and 1 for P2P
    assert visible_devices("1", ["1"]) == "1"
    assert visible_devices(CPU, ["0", "1"]) == CPU            # no GPU at all
