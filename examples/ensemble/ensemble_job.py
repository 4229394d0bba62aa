"""The entry of a ``kind: ensemble`` job (a file in the service's job directory, as the entry rules require):
``entry: examples/ensemble/ensemble_job.py:from_yaml`` with ``params: {path: the/ensemble.yaml}``."""
from dlsched.train.fleet_spec import EnsembleSpec
from dlsched.train.fleet_spec import from_yaml as load


def from_yaml(path: str) -> EnsembleSpec:
    return load(path)
