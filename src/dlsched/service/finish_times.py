"""When does a job start and finish, and reach its stated target: the one answer the API and the dashboard show,
read from stored rows (the loop's latest prediction and the current policy forecast); nothing is computed on the read
path but a parse of the stored fit."""
from __future__ import annotations

import json

from dlsched.service.store import RESCALING, RUNNING, JobRecord


def expected_times(prediction: dict | None, forecast: dict | None, running: bool) -> tuple[float | None, float | None]:
    """(start, finish) from a job's latest prediction row and its row of the current forecast.

    The policy forecast (``service/forecast.py``) when one covers the job: it knows the policy may rescale,
    preempt or delay it. Otherwise, for a running job, the finish at its current allocation; a waiting job's
    start and finish are then unknown."""
    at_allocation = (prediction or {}).get("predicted_finish") if running else None
    if forecast:
        finish = forecast.get("finish")
        return forecast.get("start"), at_allocation if finish is None else finish
    return None, at_allocation


def shown_times(job: JobRecord, prediction: dict | None, forecast: dict | None) -> tuple[float | None, float | None]:
    """(start, finish) to show: a running job's start is when it started."""
    running = job.state in (RUNNING, RESCALING)
    start, finish = expected_times(prediction, forecast, running)
    return (job.start_time if running else start), finish


def shown_fields(job: JobRecord, prediction: dict | None, forecast: dict | None) -> dict:
    """The API's ``predicted_start``, ``predicted_finish`` and, for a running job, ``predicted_finish_range``."""
    start, finish = shown_times(job, prediction, forecast)
    return {"predicted_start": start, "predicted_finish": finish, "predicted_finish_range":
            finish_range(prediction, finish) if job.state in (RUNNING, RESCALING) else None}


def finish_range(prediction: dict | None, finish: float | None) -> list[float] | None:
    """[early, late]: the shown ``finish`` at the fast and the slow end of the job's recent speed (its refit's
    ``remaining_lo_s``/``remaining_hi_s``, as shares of its ``remaining_s``, of the time from the refit to ``finish``);
    None before the refit measured a spread. How far the finish moves if the job keeps varying as it did, not a
    calibrated interval: a change the job has not seen yet (another job starting beside it) is not in it."""
    p = prediction or {}
    t0, left, lo, hi = p.get("time"), p.get("remaining_s"), p.get("remaining_lo_s"), p.get("remaining_hi_s")
    if None in (t0, left, lo, hi, finish) or left <= 0 or finish <= t0:
        return None
    return [t0 + (finish - t0) * lo / left, t0 + (finish - t0) * hi / left]


def stated_target(prediction: dict | None) -> dict | None:
    """``{"metric", "value", "step", "time", "chance", "step_80", "time_80", "reached", "final", "beyond"}`` of the
    job's stated target from its latest prediction row: a reported metric's (``prediction.target``,
    ``service.metric_target``), else its ``target_loss``; None before the loop predicted one. ``step``/``time`` None:
    not by the budget (``time`` also while it does not train); ``step_80``/``time_80``: their 80 % bands, None unless
    the target is ahead; ``reached``: the job's log got there (``step``/``time``: where and when); ``final``: the
    metric predicted at the budget; ``beyond``: the target lies past ``final`` in the metric's better direction, so
    ``step``/``time`` are the budget's, reached there only if the run beats its prediction (``chance``), as
    ``predict curve`` says it."""
    return _target_of(stored_fit(prediction))


def stored_fit(prediction: dict | None) -> dict:
    """The prediction row's ``loss_fit`` (``service.refit``), parsed where the store left it a string; {} for none."""
    fit = (prediction or {}).get("loss_fit")
    return (json.loads(fit) if isinstance(fit, str) else fit) or {}


def _target_of(fit: dict) -> dict | None:
    if (m := fit.get("metric_target")) is not None:
        return {"metric": m["metric"], "value": m["target"]} | _reach(m)
    if fit.get("target_loss") is not None:
        return {"metric": "loss", "value": fit["target_loss"]} | _reach(fit)
    return None


def stated_targets(job: JobRecord, prediction: dict | None,
                   finish: float | None = None) -> tuple[dict | None, dict | None]:
    """(``stated_target``, ``pending_target``) of ``job``'s latest prediction row, its fit parsed once; with the
    ``finish`` shown (``shown_times``), the target's times on that finish's clock (``on_finish_clock``)."""
    fit = stored_fit(prediction)
    return on_finish_clock(_target_of(fit), prediction, finish), pending_target(job, fit)


def on_finish_clock(target: dict | None, prediction: dict | None, finish: float | None) -> dict | None:
    """``target`` with its times moved from the rate the job trains at now (the refit's, as its
    ``predicted_finish``) onto the ``finish`` shown, the policy forecast's where one covers the job: each at the
    same share of the way from the refit to the finish. A target reached at the budget showed a time after the
    job's finish (the forecast gave the job more GPUs later; the target's time kept today's rate)."""
    if target is None or target["reached"] or finish is None or prediction is None:
        return target
    t0, at_rate = prediction.get("time"), prediction.get("predicted_finish")
    if t0 is None or at_rate is None or at_rate <= t0 or finish <= t0 or finish == at_rate:
        return target
    scale = (finish - t0) / (at_rate - t0)
    moved = lambda t: t if t is None or t <= t0 else t0 + (t - t0) * scale   # noqa: E731  (a time already passed stays)
    return target | {"time": moved(target["time"]),
                     "time_80": None if target["time_80"] is None else [moved(t) for t in target["time_80"]]}


def pending_target(job: JobRecord, fit: dict) -> dict | None:
    """``{"metric", "value", "why"}`` of a reported metric's target the job states (``spec.PredictionFacts.target``,
    as ``job_models.metric_target_of`` reads it) that its latest prediction row's ``fit`` (``stored_fit``) has no
    prediction of: ``why`` the refit's one line (``metric_target_missing``), None before the first refit; None when
    there is nothing pending. ``stated_target`` is then None or the ``target_loss`` (as before: a reader of
    ``target`` sees no step it could read as "not by the budget"), and ``dlsched status`` showed "-" for a target
    the job states."""
    if (stated := getattr(job.spec.prediction, "target", None)) is None or fit.get("metric_target") is not None:
        return None
    why = (fit.get("metric_target_missing") or {}).get("why")
    return {"metric": stated.metric, "value": stated.value, "why": why}


def _reach(fit: dict) -> dict:
    # "beyond": `status` showed "val_accuracy 0.93: 20:40:35 (35 %)" for a run predicted to end at 0.925, the budget's
    # time, where predict_curve puts a target past the predicted final value (its text says so)
    return {"step": fit.get("target_step"), "time": fit.get("target_time"), "chance": fit.get("target_chance"),
            "step_80": fit.get("target_step_80"), "time_80": fit.get("target_time_80"),
            "reached": bool(fit.get("target_reached")), "final": fit.get("final"),
            "beyond": bool(fit.get("target_beyond_final"))}
