"""dlsched.train — elastic data-parallel training runtime on PyTorch.

Modules: ``job`` (TrainJob, entry loading), ``run`` (start command), ``coordinator`` (one per job:
TCPStore, worker processes, partition table, job folder), ``worker`` (one process per rank),
``data`` (exactly-once partitions), ``scaling`` (batch size, LR, momentum compensation),
``autoscale`` (Or et al. rules, stragglers), ``ps`` (parameter-server mode), ``checkpoint``
(atomic files), ``files`` (control/progress/status), ``flotilla`` (FLEET shared pipeline), ``fleet_spec`` (ensemble YAML), ``fleet_job`` (an ensemble as a service job).

Job runtime contract (between ``train/`` and the service backends ``backends/``)
--------------------------------------------------------------------------------
* Job definition: a module exposing ``make_job(**params) -> dlsched.train.job.TrainJob`` (model
  factory, ``num_samples`` samples with integer ids 0..N-1 and ``get_batch(ids)``, mean-reduced
  loss, SGD hyper-parameters at the job's reference ``batch_size``, ``epochs`` and/or
  ``target_loss``). Referenced as ``path/to/file.py:make_job`` or ``module:make_job``.
* Start: ``python -m dlsched.train.run --job-dir DIR --entry examples/mlp.py:make_job --workers N
  [--batch-size B] [--param key=value ...]`` runs one coordinator that starts N worker processes
  (forked locally, or one Ray actor per bundle when ``DLSCHED_RAY_ADDRESS`` is set: ``train/launcher.py``;
  torch.distributed: gloo on CPU, NCCL when every rank can have its own GPU) and trains until done;
  exit 0 on success, 1 on a runtime failure, 2 on bad input (one line on stderr), 143 when stopped by
  SIGTERM (after a checkpoint of the last completed step).
  Extra options (all optional): ``--batch-mode fixed-global|fixed-local`` (default fixed-global),
  ``--ckpt-every STEPS`` (default 20; 0 = never), ``--threads T`` (torch threads per worker),
  ``--standby K`` (prepared spare workers: scale-out then waits only for the broadcast),
  ``--no-replace-stragglers``, ``--record-samples`` (per-step sample-id audit in DIR/samples/),
  ``--strategy ps --servers P --sync sync|ssp:S|async`` (parameter server: ``ps_runner``; ``--ckpt-every`` is
  then global batches per committed round),
  ``--strategy fleet`` (a ``kind: ensemble`` job: the entry returns an ``EnsembleSpec``, ``workers`` is the
  ensemble's share; ``fleet_job``: FLEET re-plans its flotillas at every new control generation; progress records
  carry ``member``, events ``profiled``, ``flotillas``, ``member_converged``; status.json adds ``members`` and
  ``flotillas``).
* Control: (a parameter-server job, ``--strategy ps``: ``workers`` counts its slots, servers + workers;
  see ``ps_runner``) the coordinator polls ``DIR/control.json`` between steps; the backend writes it
  atomically (``dlsched.train.files.write_control``): ``{"workers": M, "batch_size": B or null,
  "generation": k}``. A higher generation triggers an elastic resize (stop-free when no worker died)
  and/or a batch-size change (linear LR scaling + momentum-compensation ramp). It is a level, not a
  queue: requests written while a resize is in progress coalesce into the latest. ``batch_size``
  null keeps the global batch in fixed-global mode and keeps the local batch in fixed-local mode.
  A malformed file is not applied; a ``control_rejected`` event names the field.
* Progress: ``DIR/progress.jsonl``, one JSON object per line, one per step:
  ``{"time", "step", "epoch", "samples", "loss", "samples_per_s", "workers", "batch_size",
  "per_worker_samples_per_s": [...], "total_samples"}`` plus ``generation``, ``lr``, ``partition_offsets``;
  ``samples`` counts samples trained so far (all epochs), ``total_samples`` = samples per epoch x
  epochs, null when the job has a ``target_loss`` (it may converge sooner); and events
  ``{"event": "resized", "from_workers", "workers", "batch_size", "step", "pause_s", "stall_s",
  "replaced"}``, ``{"event": "checkpoint", "step", "path"}``, ``{"event": "worker_lost",
  "workers_lost", "exit_codes", "restored_step", "lost_steps", "new_generation", "checkpoint"}``,
  ``{"event": "straggler", "workers", "ewma"}``, ``{"event": "epoch_end", "epoch", "mean_loss"}``,
  ``{"event": "finished", "step"}``, ``{"event": "stopped", "step", "checkpoint"}``,
  ``{"event": "resize_failed"|"control_rejected", "error"}``, ``{"event": "resize_abandoned", "reason"}``.
  ``step`` counts optimizer steps; after a worker loss it restarts from the checkpoint's step.
* State: ``DIR/status.json`` ``{"state": "running"|"finished"|"failed"|"stopped", "pid": coordinator pid,
  "workers": int, "error": str|null}`` plus ``generation``, ``worker_pids``, ``standby_ready``.
  Checkpoints in ``DIR/ckpt/`` (``step-NNNNNNNNN.ckpt``, newest two kept); worker logs in
  ``DIR/logs/``. Re-running the start command on an existing DIR resumes from the latest
  checkpoint (with the new ``--workers``); on a finished job it exits 0 at once.
* Stopping a job: SIGTERM the coordinator's process group (start it with ``start_new_session=True``).
  Start it with SIGTERM *blocked* (``dlsched.train.preemption.sigterm_blocked`` around the spawn; the
  mask survives exec): the runtime unblocks it once its handler is installed, so a stop that arrives
  during start-up is not lost or fatal either. A runtime started this way must unblock SIGTERM itself.
  Workers ignore SIGTERM; the coordinator acts at the next safe point: a resize still waiting for its new
  workers is abandoned (``resize_abandoned``); a generation that has not trained its first step is
  cancelled (rank 0 checkpoints the state carried over from a stop-free resize; nothing is written when
  no step ran since the last checkpoint); otherwise the group finishes the current step and rank 0
  writes an atomic checkpoint of it (``checkpoint`` event). Then ``stopped`` (``step`` = the last
  completed step), status ``stopped``, exit 143: re-running the start command resumes at that step,
  redoing none. SIGKILL (e.g. after a grace period) also works, losing the steps since the last periodic
  checkpoint; orphaned workers exit once the store is gone.
* GPUs: the coordinator takes the job's devices from ``CUDA_VISIBLE_DEVICES`` (set by the backend; unset =
  every local GPU) and later from ``control.json``'s optional ``"devices": [...]`` (the backend's new grant
  on a resize). Each worker process owns exactly one of them for its whole life: its
  ``CUDA_VISIBLE_DEVICES`` lists it first (= its cuda:0), then the job's other devices (NCCL P2P peers);
  "" = CPU. Workers whose device was taken away leave at the resize (all of them: the state then moves
  through a checkpoint); NCCL when every rank of a generation has a GPU, else gloo. ``status.json`` adds ``devices`` (the job's) and ``worker_devices``
  (what each current worker reported seeing, per rank; null until it is ready).
"""
