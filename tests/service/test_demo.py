"""``dlsched demo`` end to end on a tiny workload (contract-following job, test policy): live run + report."""
import io
import re

import pandas as pd
import pytest
from rich.console import Console

from dlsched.commands.demo import run_demo
from tests.service.conftest import RUNTIME, job_yaml


@pytest.mark.slow
def test_demo_runs_a_staggered_workload_and_writes_the_report(tmp_path):
    (tmp_path / "cluster.yaml").write_text("nodes: [{name: n0, gpus: 2}, {name: n1, gpus: 1}]\n"
                                           "policy: test-elastic\ninterval_s: 0.3\n")
    for name, mx in (("a", 3), ("b", 1), ("c", 2)):
        (tmp_path / f"{name}.yaml").write_text(job_yaml(name, max_gpus=mx, samples=9600 if name == "a" else 960, step_s=0.06))
    # b and c wait for a's first step: a exec'd runtime can take seconds to start on a busy machine, and a job
    # that starts after its neighbours arrived is placed once, never rescaled. a trains >= 6 s after that step
    # even at 3 GPUs: with 2400 samples it ended 0.3 s after its first shrink, and on a loaded host before the
    # demo saw its first step at all (no resize: the stress run's one failure)
    (tmp_path / "workload.yaml").write_text("cluster: cluster.yaml\njobs:\n  - {at: 0, spec: a.yaml}\n"
                                            "  - {at: 1.5, spec: b.yaml, after_first_step_of: a}\n"
                                            "  - {at: 3, spec: c.yaml, after_first_step_of: a}\n")
    out = tmp_path / "report"
    buf = io.StringIO()
    rc = run_demo(tmp_path / "workload.yaml", out, 120, RUNTIME, None, tmp_path, Console(file=buf, width=150))
    assert rc == 0, buf.getvalue()[-2000:]
    for f in ("report.md", "predicted_vs_actual.csv", "allocation_gantt.png", "loss_fits.png", "events.jsonl"):
        assert (out / f).stat().st_size > 0, f
    table = pd.read_csv(out / "predicted_vs_actual.csv")
    assert list(table["state"]) == ["finished"] * 3
    assert table.loc[0, "resizes"] >= 1                       # the elastic job was rescaled live
    assert table["jct_error"].notna().all() and (table["fraction_at_prediction"] >= 0.25).all()
    # the perf model's miss split into work and speed: every job has a sample budget, so the work is known and
    # the whole miss is the speed's
    assert table["work_error"].abs().max() < 1e-9
    split = (1 + table["work_error"]) / (1 + table["speed_error"]) - 1
    assert split.to_numpy() == pytest.approx(table["run_remaining_error"].to_numpy(), abs=1e-9)
    assert "speed_error" in (out / "report.md").read_text()
    assert "submitted job 3 (c)" in buf.getvalue() and "rescaling" in buf.getvalue()
    # each event's detail as `dlsched events` prints it (was Python's repr: {'gpus': 1, ...}), none: nothing after
    assert re.search(r'job 1 -> running \{"gpus": \d, "batch_size": 32\}\n', buf.getvalue()), buf.getvalue()[:1500]
    assert re.search(r"job \d -> finished\n", buf.getvalue()), buf.getvalue()[-1500:]


@pytest.mark.parametrize("after", ["c", "b", "nobody"])
def test_an_arrival_can_wait_only_for_a_job_that_arrives_before_it(tmp_path, after):
    """Waiting on a later job, on itself or on a name the workload lacks would hold the arrival until --timeout."""
    from dlsched.errors import UserError

    for name in "abc":
        (tmp_path / f"{name}.yaml").write_text(job_yaml(name))
    (tmp_path / "cluster.yaml").write_text("nodes: [{name: n0, gpus: 1}]\npolicy: test-fifo\n")
    (tmp_path / "workload.yaml").write_text("cluster: cluster.yaml\njobs:\n  - {at: 0, spec: a.yaml}\n"
                                            f"  - {{at: 1, spec: b.yaml, after_first_step_of: {after}}}\n"
                                            "  - {at: 2, spec: c.yaml}\n")
    with pytest.raises(UserError, match=f"after_first_step_of '{after}' \\(b.yaml\\): expected the name of a job "
                                        "that arrives earlier \\(a\\)"):
        run_demo(tmp_path / "workload.yaml", tmp_path / "out", 60, RUNTIME, None, tmp_path, Console(file=io.StringIO()))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("timeout", [-1.0, 0.0, float("nan")])
def test_a_timeout_that_is_not_positive_is_refused_before_the_service_starts(tmp_path, timeout):
    """--timeout -1 started the service, submitted the first job, cancelled it at once and exited 1."""
    from dlsched.errors import UserError

    with pytest.raises(UserError, match="--timeout .*expected a positive number of seconds"):
        run_demo(tmp_path / "no-workload.yaml", tmp_path / "out", timeout, RUNTIME, None, tmp_path, Console(file=io.StringIO()))
    assert not (tmp_path / "out").exists()


def test_an_unknown_policy_is_named_as_the_option(tmp_path):
    """`demo --policy nosuch` said 'cluster spec: policy: unknown policy', a field of a file the user never named
    (`serve --policy nosuch` says '--policy nosuch: ...')."""
    from dlsched.errors import UserError
    from dlsched.paths import REPO_ROOT

    with pytest.raises(UserError) as e:
        run_demo(REPO_ROOT / "examples" / "demo" / "workload.yaml", tmp_path / "out", 60, RUNTIME, "nosuch", tmp_path,
                 Console(file=io.StringIO()))
    assert str(e.value).startswith("--policy nosuch: unknown policy 'nosuch'; known: "), e.value
    assert not (tmp_path / "out").exists()


def test_an_out_folder_whose_state_is_not_a_demos_is_left_alone(tmp_path):
    """--out ~/project deleted ~/project/state, whatever it held, before the demo started."""
    from dlsched.errors import UserError

    mine = tmp_path / "project" / "state" / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    with pytest.raises(UserError, match="is not a dlsched state folder"):
        run_demo(tmp_path / "no-workload.yaml", tmp_path / "project", 60, RUNTIME, None, tmp_path, Console(file=io.StringIO()))
    assert mine.read_text() == "mine"


def test_the_closing_summary_keeps_each_job_on_one_line_of_an_80_column_terminal():
    """`make demo`'s last table was pandas' text, soft-wrapped at 80 columns: each row's last three cells on a line of
    their own, under the wrong headers. It is fitted as the other tables are, naming the columns it leaves out."""
    from dlsched.commands.demo import print_summary

    report = pd.DataFrame({"id": [1, 2], "name": ["mlp-wide", "resnet20"], "state": ["finished", "finished"],
                           "jct_s": [39.963, 315.825], "resizes": [0, 5], "preemptions": [0, 1],
                           "jct_error": [-0.153, float("nan")], "policy_jct_error": [-0.153, float("nan")],
                           "remaining_error": [-0.218, float("nan")], "run_remaining_error": [-0.218, float("nan")]})
    out = Console(width=80, file=io.StringIO(), record=True)
    print_summary(report, out)
    lines = out.export_text().splitlines()
    assert lines[0].split() == ["id", "name", "state", "jct_s", "resizes", "preemptions", "jct_error"]
    assert lines[2].split() == ["1", "mlp-wide", "finished", "39.963", "0", "0", "-0.153"]
    assert lines[3].split() == ["2", "resnet20", "finished", "315.825", "5", "1", "-"]   # no prediction at 25 %
    assert " ".join(lines[4:]).split() == ("not shown at 80 columns: policy_jct_error, remaining_error, "
                                           "run_remaining_error (report.md has every column)").split()
