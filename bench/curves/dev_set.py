"""The development set of real training curves with their known LR schedules and budgets.

* ``bench/curves/*.csv`` (``index.csv``): our own runs, ``make_dev_curves.py`` (digits held-out loss,
  character-GRU and character-transformer held-out loss) under every schedule family, and its fine-tune and
  over-fitting runs (digits 5-9 fine-tune accuracy, char-GRU fine-tune loss, breast-cancer over-fitting loss)
  under four or five; the index names each run's model family, metric (the CSV column), regime
  (scratch | finetune) and whether it over-fits by design (``overfits``: the cancer runs; ``perf.prior``
  pools no shape from them).
* Every curve's ``meta`` carries its ``regime`` (``perf.prior``): the Pollux apps and the seed log are from-scratch runs.
* The Pollux apps (``shared/data/pollux/traces/<app>/validation-<M0>.csv`` at the base batch, to the
  artifact's max_epochs; Apache-2.0). Schedules from the artifact's own training scripts (petuum/adaptdl,
  branch osdi21-artifact, ``benchmark/models/<app>``): cifar10 ExponentialLR to 0.0133× over 100 epochs;
  imagenet ×0.1 at epochs 30 and 60; deepspeech2 ÷1.1 per epoch; ncf MultiStepLR [4, 7] ×0.2 (10 epochs);
  yolov3 2 warm-up epochs then cosine. The LR changes once per epoch (x = iterations at the base batch).
  bert (2 epochs) has too few points.
* With ``with_accuracy``, also the held-out accuracy every one of our loss runs logged beside its loss
  (``<run>-accuracy``, metric accuracy): the curves the error-metric bands are calibrated on
  (``Calibration.error_kind``); the Pollux error rates and the digits fine-tunes are the others.
* The seed study's ResNet-50 log (``gpu-training/resnet50-p100-v2_per_epoch_from_log.csv``, train loss):
  its regime keeps LR 0.1 until epoch 81, so the 70 logged epochs ran at constant LR.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.perf.profile import pollux_app, seed_log
from dlsched.perf.schedule import Schedule, parse_schedule

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class DevCurve:
    name: str
    x: np.ndarray
    y: np.ndarray           # the metric as logged
    metric: str             # loss | error | accuracy
    schedule: Schedule
    meta: dict = field(default_factory=dict)


def _per_epoch(ends: np.ndarray, lr_of_epoch) -> str:
    """A ``steps:`` spec with the LR of each epoch from the x its epoch starts at."""
    starts = np.concatenate([[0.0], ends[:-1]])
    return "steps:" + ",".join(f"{s:g}={lr_of_epoch(e):.6g}" for e, s in enumerate(starts))


POLLUX_SCHEDULES = {
    "cifar10": lambda ends, ipe: _per_epoch(ends, lambda e: 0.0133 ** (e / 100)),
    "imagenet": lambda ends, ipe: f"step:{30 * ipe:g},{60 * ipe:g}:0.1",
    "deepspeech2": lambda ends, ipe: _per_epoch(ends, lambda e: 1.1 ** -e),
    "ncf": lambda ends, ipe: f"step:{4 * ipe:g},{7 * ipe:g}:0.2",
    "yolov3": lambda ends, ipe: f"cosine:warmup={2 * ipe:g}",
}
POLLUX_META = {"cifar10": ("resnet", 18, "cifar10"), "imagenet": ("resnet", 50, "imagenet"),
               "deepspeech2": ("rnn", 5, "librispeech"), "ncf": ("mlp", 3, "movielens"),
               "yolov3": ("darknet", 53, "voc")}
# the metric a user would declare: yolov3's validation curve is its detection loss, the others error rates
# (1 − accuracy / hit rate, and deepspeech2's WER)
POLLUX_METRIC = {"yolov3": "loss"}


def dev_curves(with_accuracy: bool = False) -> list[DevCurve]:
    out, accuracy = [], []
    idx = pd.read_csv(HERE / "index.csv")
    for row in idx.itertuples():
        if not (HERE / row.file).exists():  # not generated yet
            continue
        d = pd.read_csv(HERE / row.file)
        meta = {"family": row.family, "dataset": row.task, "metric": row.metric, "regime": row.regime,
                "overfits": bool(row.overfits)}
        name, schedule = row.file.removesuffix(".csv"), parse_schedule(row.schedule, float(row.budget))
        out.append(DevCurve(name, d.step.to_numpy(float), d[row.metric].to_numpy(float), row.metric, schedule, meta))
        if with_accuracy and row.metric == "loss" and "accuracy" in d:
            accuracy.append(DevCurve(f"{name}-accuracy", d.step.to_numpy(float), d.accuracy.to_numpy(float),
                                     "accuracy", schedule, {**meta, "metric": "accuracy"}))
    for app, spec in POLLUX_SCHEDULES.items():
        c = pollux_app(app).loss_curve()
        x = c.step.to_numpy(float)
        ipe = float(np.median(np.diff(x)))
        fam, depth, data = POLLUX_META[app]
        metric = POLLUX_METRIC.get(app, "error")
        out.append(DevCurve(f"pollux-{app}", x, c.loss.to_numpy(float), metric,
                            parse_schedule(spec(x, ipe), float(x[-1])),
                            {"family": fam, "depth": depth, "dataset": data, "metric": metric, "regime": "scratch"}))
    log = seed_log()
    x = log.steps_cum_assumed.to_numpy(float)
    out.append(DevCurve("seed-resnet50", x, log.train_loss.to_numpy(float), "loss", parse_schedule("constant", float(x[-1])),
                        {"family": "resnet", "depth": 50, "dataset": "cifar10", "metric": "loss", "regime": "scratch"}))
    return out + accuracy
