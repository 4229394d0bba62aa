"""Trace-driven simulator: ``run(workload, policy, ...) -> SimResult`` drives any registered policy."""
from dlsched.sim.engine import SimConfig, Simulator, run
from dlsched.sim.metrics import SimResult
from dlsched.sim.workload import WorkloadJob, Workload, read_gavel, read_philly, read_pollux, read_workload

__all__ = ["run", "Simulator", "SimConfig", "SimResult", "WorkloadJob", "Workload", "read_workload", "read_pollux",
           "read_philly", "read_gavel"]
