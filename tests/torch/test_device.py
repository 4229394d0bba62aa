"""``dt.device()``: the device a worker trains on. Its GPU path (cuda:0, NCCL) ran on a lent H100 through
bench/gpu_checks.sh; CI has no GPU, so here the CPU answer and the backend it pairs with."""
import torch

import dlsched.torch as dt
from dlsched.train.worker import pick_backend


def test_a_worker_without_a_gpu_trains_on_the_cpu_over_gloo():
    if torch.cuda.is_available():
        assert dt.device() == torch.device("cuda", 0)
    else:
        assert dt.device() == torch.device("cpu")
        assert pick_backend(["0"]) == ("gloo", torch.device("cpu"))   # a GPU in the plan but none here
