"""dlsched.train — elastic data-parallel training runtime on PyTorch.

The contract with the backends and between coordinator and workers: ``protocol`` (records, store keys,
job-folder schemas) and ``docs/runtime.md``. User scripts train through ``dlsched.torch``.
Modules: ``job`` (TrainJob), ``run`` (start command), ``coordinator``, ``worker``, ``data`` (exactly-once
partitions), ``scaling`` (batch, LR), ``autoscale``, ``ps``/``ps_runner`` (parameter server), ``checkpoint``,
``files``, ``flotilla`` (FLEET shared pipeline), ``fleet_spec`` (ensemble YAML), ``fleet_job`` (an ensemble job).
"""
