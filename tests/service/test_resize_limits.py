"""What a hand resize may ask of a job (service/resize_limits)."""
from dlsched.service.resize_limits import resize_refusal
from dlsched.spec import JobSpec

ENSEMBLE = JobSpec(name="e", kind="ensemble", entry="dlsched.train.fleet_spec:from_yaml", params={"path": "e.yaml"},
                   gpus=1, min_gpus=1, max_gpus=3)


def test_an_ensemble_is_resized_by_its_workers_only():
    """`dlsched resize ENS -n 2 --batch 64` was accepted: status showed BATCH 64 and the job was held at it, while the
    FLEET runtime trained every member at its ensemble YAML's batch_size (control.json's batch is not read)."""
    assert resize_refusal(ENSEMBLE, 2, None) is None
    assert resize_refusal(ENSEMBLE, 2, 64) == ("batch_size: 64: an ensemble trains at its ensemble YAML's batch_size; "
                                               "resize it by its workers only")
    assert resize_refusal(ENSEMBLE, 4, None) == "workers: 4 is above the job's max_gpus=3 (its spec allows 1..3)"
