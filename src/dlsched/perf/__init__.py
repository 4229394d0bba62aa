"""dlsched.perf — what a job will do: how fast it converges, how fast it runs, how long it will take.

* ``convergence``: Optimus loss curve ``fit_curve(steps, losses) -> ConvergenceFit`` (``.curve`` is a
  ``LossCurve`` with ``remaining_steps(k, target_loss=|delta=, steps_per_epoch=)``); ``OnlineConvergence``.
* ``speed``: ``fit_optimus_sync/async`` (PS jobs, steps/s); ``fit_step_time`` (all-reduce step time from
  measured steps) and ``AllReduceSpeedModel`` (a ``policy.base.ThroughputModel`` per GPU type);
  ``fit_pollux_app``, ``fit_h100_compute``, ``with_gpu_type``.
* ``efficiency``: ``GradientNoise``, ``progress_gain``, ``efficiency`` (Pollux).
* ``profile``: loaders of the shared traces (``pollux_app``, ``h100_throughput``, ``seed_log``,
  ``optimus_table2``) and CSV checks that raise one-line ``UserError``s; a leaf (imports no model).
* ``pollux``: the Pollux traces as one model (``StepTimes``, ``TraceApp``, ``load_app``): the simulator's
  ground truth.
* ``curve_predict``: ``predict_curve(x, values, schedule, metric=, target=|target_fraction=)`` — THE online
  curve predictor (CLI ``predict curve``, the service's refit, the simulator): schedule-aware final value and
  steps to a target with calibrated 80 % intervals. Built from ``schedule`` (``parse_schedule(SPEC, budget)``,
  ``Schedule.from_points`` for a logged LR, ``areas``), ``annealing`` (the LR-annealing law fit),
  ``calibration`` (conformal bands, ``calibration.json``), ``prior`` (from finished jobs' fits) and
  ``curve_readers`` (``read_curve`` of CSV / TensorBoard / trainer_state.json / progress.jsonl).
* ``predict``: ``remaining_steps`` with a residual-bootstrap interval, ``ps_configurations``,
  ``allreduce_configurations``, ``best_workers``.
"""
