import torch

from dlsched.train.worker import pick_backend


def test_cpu_machine_uses_gloo_on_cpu():
    if torch.cuda.is_available():  # pragma: no cover - the GPU path is checked on the device machine
        backend, device = pick_backend(1, 0)
        assert backend == "nccl" and device == torch.device("cuda", 0)
    else:
        assert pick_backend(4, 3) == ("gloo", torch.device("cpu"))
