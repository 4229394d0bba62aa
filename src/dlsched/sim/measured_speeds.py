"""Per-GPU-type speed factors of the Pollux applications from measurements, for ``SimConfig.gpu_speed``.

The Pollux traces were measured on T4 GPUs (``perf.profile.POLLUX_GPU_TYPE``); ``h100/throughput.csv`` holds
single-H100 samples/s of the same networks for two of the six applications: cifar10 (ResNet-18 on CIFAR-10) and
imagenet (ResNet-50 on ImageNet). A factor is the median over the traced local batch sizes of H100 samples/s
(log-log interpolated between its measured batches, fp32, synthetic inputs) / traced single-GPU samples/s. The other applications (bert,
deepspeech2, ncf, yolov3) have no H100 measurement: they get the geometric mean of the measured factors, an
assumption ``measured_gpu_speeds`` reports beside the factors so that a bench can say which is which.
"""
from __future__ import annotations

import numpy as np

from dlsched.perf.profile import POLLUX_APPS, h100_throughput, pollux_app

H100_MODEL = {"cifar10": ("resnet18", "cifar10"), "imagenet": ("resnet50", "imagenet")}   # h100/throughput.csv


def _traced_single_gpu(app: str) -> dict[int, float]:
    """Samples/s of one traced GPU per local batch (placements.csv rows with one replica on one node)."""
    p = pollux_app(app).placements
    one = p[(p.num_replicas == 1) & (p.num_nodes == 1)]
    return {int(b): float(b / t) for b, t in one.groupby("local_bsz").step_time.median().items()}


def measured_gpu_speeds(gpu_type: str = "h100") -> tuple[dict[str, float], tuple[str, ...]]:
    """(``{"h100/<app>": factor}`` for every Pollux app, the apps whose factor was measured)."""
    h100 = h100_throughput()
    h100 = h100[h100.precision == "fp32"]
    measured = {}
    for app, (model, dataset) in H100_MODEL.items():
        rows = h100[(h100.model == model) & (h100.dataset == dataset)].sort_values("batch_size")
        traced = _traced_single_gpu(app)
        b, rate = np.log(rows.batch_size.to_numpy(float)), np.log(rows.samples_per_s.to_numpy(float))
        # H100 samples/s at each traced local batch inside its measured range, log-log interpolated
        ratios = [float(np.exp(np.interp(np.log(lb), b, rate))) / r for lb, r in traced.items()
                  if b[0] <= np.log(lb) <= b[-1]]
        if ratios:
            measured[app] = float(np.median(ratios))
    fallback = float(np.exp(np.mean(np.log(list(measured.values()))))) if measured else 1.0
    return ({f"{gpu_type}/{a}": measured.get(a, fallback) for a in POLLUX_APPS}, tuple(sorted(measured)))
