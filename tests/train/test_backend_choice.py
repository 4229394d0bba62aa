import torch

from dlsched.train.worker import pick_backend


def test_cpu_machine_uses_gloo_on_cpu():
    if torch.cuda.is_available():  # pragma: no cover - the GPU path is checked on the device machine
        assert pick_backend(["0"]) == ("nccl", torch.device("cuda", 0))   # the worker sees only its own GPU
        assert pick_backend(["0", ""])[0] == "gloo"                        # one rank without a GPU: gloo for all
    else:
        assert pick_backend(["0", "1", "2"]) == ("gloo", torch.device("cpu"))
    assert pick_backend([]) == ("gloo", torch.device("cpu"))
