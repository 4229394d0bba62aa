import json
from pathlib import Path

import pytest

from dlsched.errors import UserError
from dlsched.spec import (JobSpec, SpecError, load_cluster_spec, load_cluster_spec_file, load_job_spec,
                          load_job_spec_file, to_json, to_yaml)

GOOD = """
name: resnet-elastic
entry: examples/mlp.py:make_job
gpus: 2
min_gpus: 1
max_gpus: 4
batch_size: 64
min_batch_size: 32
max_batch_size: 256
params: {epochs: 2, lr: 0.1, arch: wide, shuffle: true}
"""


def test_valid_spec_round_trips_through_yaml_and_json():
    spec = load_job_spec(GOOD)
    assert spec.elastic and spec.gpu_range == (1, 4) and spec.params["lr"] == 0.1
    assert load_job_spec(to_yaml(spec)) == spec
    assert load_job_spec(to_json(spec), fmt="json") == spec


def test_rigid_spec_is_not_elastic():
    spec = load_job_spec("name: a\nentry: m:make_job\ngpus: 3")
    assert not spec.elastic and spec.gpu_range == (3, 3)


@pytest.mark.parametrize("text, needle", [
    ("name: a\nentry: m:f\ngpus: '4'", "field gpus: Input should be a valid integer (got '4')"),
    ("name: a\nentry: m:f\ngpus: true", "field gpus: Input should be a valid integer (got True)"),
    ("name: a\nentry: m:f\ngpus: 2.0", "field gpus"),
    ("name: a\nentry: m:f\ngpus: -1", "field gpus: Input should be greater than or equal to 1 (got -1)"),
    ("name: a\nentry: m:f\ngpus: 0", "field gpus"),
    ("name: a\nentry: m:f\ngpus: 100000000000000000000", "less than or equal to 4096"),
    ("name: a\nentry: m:f\nbatch_size: 1000000000", "field batch_size"),
    ("name: a\nentry: m:f\ngpu: 2", "field gpu: Extra inputs are not permitted"),
    ("entry: m:f", "field name: Field required"),
    # a misspelt field: was "field name: Field required (+1 more)", the typo left unsaid
    ("nmae: a\nentry: m:f", "field nmae: Extra inputs are not permitted (got 'a'); did you mean 'name'? (+1 more)"),
    ("name: a\nentry: m:f\nmax_gpu: 2", "field max_gpu: Extra inputs are not permitted (got 2); did you mean 'max_gpus'?"),
    ("name: a b\nentry: m:f", "field name: String should match pattern"),
    ("name: a\nentry: 'rm -rf /; x:y'", "field entry"),
    # the bound given, not "must lie in [min_gpus=2, max_gpus=1]" of a min_gpus the user never gave
    ("name: a\nentry: m:f\ngpus: 2\nmax_gpus: 1", "job.yaml: gpus=2 is above max_gpus=1"),
    ("name: a\nentry: m:f\ngpus: 1\nmin_gpus: 2", "job.yaml: gpus=1 is below min_gpus=2"),
    # a rule across fields names them: was "field (top level): Value error, min_gpus=3 > max_gpus=1"
    ("name: a\nentry: m:f\nmin_gpus: 3\nmax_gpus: 1", "job.yaml: min_gpus=3 > max_gpus=1"),
    ("name: a\nentry: m:f\ngpus: 4\nmin_gpus: 1\nmax_gpus: 2", "gpus=4 must lie in [min_gpus=1, max_gpus=2]"),
    ("name: a\nentry: m:f\nmin_batch_size: 64", "min_batch_size and max_batch_size go together"),
    ("name: a\nentry: m:f\nmin_batch_size: 64\nmax_batch_size: 32", "min_batch_size=64 > max_batch_size=32"),
    ("name: a\nentry: m:f\nparams: {lr: .inf}", "param lr=inf is not finite"),
    ("name: a\nentry: m:f\nparams: {lr: [1, 2]}", "param lr must be a number, bool or string"),
    ("name: a\nentry: m:f\nparams: {'bad key': 1}", "is not an identifier"),
    # prediction facts: the service's predictions read them, so a typo must not pass for "none given"
    ("name: a\ncommand: [python, t.py]\nprediction: {schedule: cosin}", "field prediction.schedule: "
     "schedule 'cosin': unknown"),
    ("name: a\ncommand: [python, t.py]\nprediction: {schedule: 'step:30:0'}", "field prediction.schedule"),
    ("name: a\ncommand: [python, t.py]\nprediction: {schedule: lr-column}", "lr-column is what a job without a "
     "schedule gets"),
    ("name: a\ncommand: [python, t.py]\nprediction: {regime: fine}", "field prediction.regime: "
     "regime must be one of scratch, finetune, got 'fine'"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target_loss: .nan}", "field prediction.target_loss: Input "
     "should be a finite number"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target_los: 1}", "field prediction.target_los: Extra inputs"),
    ("name: a\ncommand: [python, t.py]\nprediction: {depth: 0}", "field prediction.depth"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target: {metric: val_acc, value: 0.9, kind: acc}}",
     "field prediction.target.kind: Input should be 'loss', 'error' or 'accuracy' (got 'acc')"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target: {metric: val_acc, kind: accuracy}}",
     "field prediction.target.value: Field required"),
    # a target out of its metric's range was accepted: an accuracy of 150, a loss of -3
    ("name: a\ncommand: [python, t.py]\nprediction: {target: {metric: val_accuracy, value: 150, kind: accuracy}}",
     "field prediction.target.value: an accuracy target must lie in 0-1 (a fraction) or 0-100 (%) (got 150)"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target: {metric: val_accuracy, value: -0.1, kind: accuracy}}",
     "field prediction.target.value: an accuracy target must lie in 0-1"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target: {metric: val_loss, value: 0, kind: loss}}",
     "field prediction.target.value: a loss target must be > 0 (got 0)"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target: {metric: wer, value: -2, kind: error}}",
     "field prediction.target.value: an error target must be > 0 (got -2)"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target_loss: -3}",
     "field prediction.target_loss: Input should be greater than 0 (got -3)"),
    ("name: a\ncommand: [python, t.py]\nprediction: {target_loss: 0}", "field prediction.target_loss: Input should "
     "be greater than 0 (got 0)"),
    ("name: a\nentry: m:f\nparams: {target_loss: -1.5}", "param target_loss=-1.5 must be > 0"),
    ("- 1\n- 2", "expected a mapping of fields, got list"),
    ("name: [unclosed", "invalid YAML"),
])
def test_bad_specs_are_refused_with_one_line(text, needle):
    with pytest.raises(SpecError) as e:
        load_job_spec(text, "job.yaml")
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and msg.startswith("job.yaml: ")
    assert isinstance(e.value, UserError)


@pytest.mark.parametrize("target", ["{metric: val_accuracy, value: 0.93, kind: accuracy}",
                                    "{metric: val_accuracy, value: 93, kind: accuracy}",
                                    "{metric: top1, value: 100, kind: accuracy}", "{metric: top1, value: 0, kind: accuracy}",
                                    "{metric: wer, value: 12.5, kind: error}", "{metric: val_loss, value: 0.01, kind: loss}"])
def test_targets_in_their_metrics_range_are_accepted(target):
    spec = load_job_spec(f"name: a\ncommand: [python, t.py]\nprediction: {{target: {target}, target_loss: 0.2}}")
    assert spec.prediction.target.value >= 0 and spec.prediction.target_loss == 0.2
    assert load_job_spec(to_json(spec), fmt="json") == spec


def test_non_utf8_and_oversized_bodies():
    with pytest.raises(SpecError, match=r"not UTF-8 \(byte 6"):
        load_job_spec(b"name: \xff\xfe", "body")
    with pytest.raises(SpecError, match="limit is 1048576"):
        load_job_spec(b"x" * (2 << 20), "body")


def test_json_is_parsed_as_json():
    with pytest.raises(SpecError, match="invalid JSON"):
        load_job_spec("name: a", fmt="json")
    assert load_job_spec(json.dumps({"name": "a", "entry": "m:f"}), fmt="json").name == "a"


def test_files_name_themselves(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("name: a\nentry: m:f\ngpus: -3\n")
    with pytest.raises(SpecError, match=r"job.yaml: field gpus: .*\(got -3\)"):
        load_job_spec_file(f)
    with pytest.raises(SpecError, match="cannot read"):
        load_job_spec_file(tmp_path / "missing.yaml")


def test_a_misspelt_node_field_is_named_with_the_field_it_meant():
    """Was "field nodes.0.gpus: Field required (+1 more)": the 'gpu' the user wrote went unmentioned."""
    with pytest.raises(SpecError) as e:
        load_cluster_spec("nodes:\n  - {name: n0, gpu: 3}\n", "cluster.yaml")
    assert str(e.value) == ("cluster.yaml: field nodes.0.gpu: Extra inputs are not permitted (got 3); "
                            "did you mean 'gpus'? (+1 more)")


def test_cluster_spec(tmp_path):
    c = load_cluster_spec("nodes: [{name: a, gpus: 4}, {name: b, gpus: 2, gpu_type: v100}]\npolicy: elastic")
    assert [n.gpus for n in c.nodes] == [4, 2] and c.interval_s == 2.0
    with pytest.raises(SpecError, match="duplicate node names"):
        load_cluster_spec("nodes: [{name: a, gpus: 4}, {name: a, gpus: 2}]")
    with pytest.raises(SpecError, match="field nodes: List should have at least 1 item"):
        load_cluster_spec("nodes: []")
    with pytest.raises(SpecError, match="field nodes.0.gpus"):
        load_cluster_spec("nodes: [{name: a, gpus: -1}]")


def test_demo_examples_validate():
    from dlsched.paths import REPO_ROOT

    demo = REPO_ROOT / "examples" / "demo"
    load_cluster_spec_file(demo / "cluster.yaml")
    specs = [load_job_spec_file(f) for f in sorted((demo / "jobs").glob("*.yaml"))]
    assert len(specs) >= 4 and any(s.elastic and s.min_batch_size for s in specs)
    assert isinstance(specs[0], JobSpec)


def test_parameter_server_fields():
    base = "name: a\nentry: x.py:make_job\n"
    s = load_job_spec(base + "gpus: 4\nstrategy: ps\nservers: 2\nsync: ssp:3\n")
    assert (s.strategy, s.num_servers, s.sync) == ("ps", 2, "ssp:3")
    assert load_job_spec(base + "gpus: 2\n").num_servers == 0
    from dlsched.backends.base import Launch, runtime_command

    sparse = load_job_spec(base + "gpus: 3\nstrategy: ps\nsparse: true\n")
    cmd = runtime_command(["run"], Launch(1, sparse, Path("d"), 3, None, {}, 1))
    assert cmd[cmd.index("--servers"):cmd.index("--servers") + 5] == ["--servers", "1", "--sync", "sync", "--sparse"]
    for text, needle in ((base + "gpus: 2\nstrategy: ps\nservers: 2\n", "servers=2 count against the GPUs"),
                         (base + "gpus: 3\nstrategy: ps\nsync: ssp:x\n", "field sync"),
                         (base + "gpus: 3\nservers: 1\n", "set strategy: ps"),
                         (base + "gpus: 3\nsparse: true\n", "set strategy: ps")):
        with pytest.raises(SpecError, match=needle) as e:
            load_job_spec(text)
        assert "\n" not in str(e.value)


def test_autoscale_option():
    base = "name: a\nentry: x.py:make_job\n"
    s = load_job_spec(base + "autoscale: {every_steps: 5, max_workers: 4, utility_value: 10, utility_seconds: 3600}\n")
    assert (s.autoscale.every_steps, s.autoscale.threshold, s.autoscale.utility_value) == (5, 0.1, 10)
    for text, needle in ((base + "autoscale: {threshold: 2}\n", "autoscale.threshold"),
                         (base + "autoscale: {utility_value: 1}\n", "go together"),
                         (base + "gpus: 3\nstrategy: ps\nautoscale: {}\n", "strategy must be allreduce")):
        with pytest.raises(SpecError, match=needle):
            load_job_spec(text)


def test_a_command_job_runs_the_users_script_and_takes_no_make_job_fields():
    from pathlib import Path

    from dlsched.backends.base import Launch, runtime_command

    spec = load_job_spec('{"name": "cifar", "command": ["python", "examples/cifar_resnet.py", "--epochs", "2"], '
                         '"min_gpus": 1, "max_gpus": 4, "batch_size": 64}', fmt="json")
    cmd = runtime_command(["rt"], Launch(1, spec, Path("/j"), 2, 128))
    assert "--entry" not in cmd and cmd[cmd.index("--") + 1:] == ["python", "examples/cifar_resnet.py", "--epochs", "2"]
    assert cmd[cmd.index("--reference-batch-size") + 1] == "64"
    for bad in ('{"name": "x", "entry": "a.py:make_job", "command": ["python", "a.py"]}', '{"name": "x"}',
                '{"name": "x", "command": ["python", "a.py"], "params": {"lr": 0.1}}', '{"name": "x", "command": []}'):
        with pytest.raises(SpecError) as e:
            load_job_spec(bad, fmt="json")
        assert "\n" not in str(e.value)


def test_checkpoint_uri_reaches_the_runtime_and_only_for_all_reduce_jobs():
    from pathlib import Path

    from dlsched.backends.base import Launch, runtime_command

    spec = load_job_spec("name: m\nentry: examples/mlp.py:make_job\ncheckpoint_uri: file:///shared/ckpts/m\n")
    cmd = runtime_command(["rt"], Launch(1, spec, Path("/j"), 1, None))
    assert cmd[cmd.index("--checkpoint-uri") + 1] == "file:///shared/ckpts/m"
    assert "--checkpoint-uri" not in runtime_command(["rt"], Launch(1, load_job_spec(
        "name: m\nentry: examples/mlp.py:make_job\n"), Path("/j"), 1, None))
    with pytest.raises(SpecError, match="checkpoint_uri='s3://b/m': only an all-reduce") as e:
        load_job_spec("name: m\nentry: examples/mlp.py:make_job\ngpus: 3\nstrategy: ps\ncheckpoint_uri: s3://b/m\n")
    assert "\n" not in str(e.value)
