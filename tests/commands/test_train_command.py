"""`dlsched train` as a user runs it (a separate process): bad numbers are one line, exit 2, before any worker."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args, line", [
    (("--batch-size", "0"), "error: --batch-size 0: must be >= 1"),        # was dropped: trained at batch 32, exit 0
    (("--ckpt-every", "-1"), "error: --ckpt-every -1: must be >= 0 (0 = never)"),   # was a checkpoint on every step
    # these were the runtime's 17-line argparse usage, naming python -m dlsched.train.run and options train lacks
    (("--strategy", "bogus"), "error: --strategy 'bogus': expected allreduce or ps"),
    (("--batch-mode", "global"), "error: --batch-mode 'global': expected fixed-global or fixed-local"),
    (("--standby", "-1"), "error: --standby -1: must be >= 0"),   # was accepted, exit 0
])
def test_train_refuses_bad_numbers_and_choices_in_one_line(tmp_path, args, line):
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not start')\n")
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "--job-dir", str(tmp_path / "job"), *args,
                        "--", "python", str(tmp_path / "train.py")], capture_output=True, text=True, timeout=120,
                       cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip() == line, r.stderr[-500:]
    assert not (tmp_path / "job" / "logs").exists()   # no worker was started


@pytest.mark.parametrize("args, line", [
    (("--batch-size", "0"), "error: --batch-size 0: must be >= 1"),                   # refused by the runtime's parse
    (("--sparse",), "error: --sparse: a parameter-server option, not for --strategy allreduce; add --strategy ps"),
])
def test_a_refused_option_is_answered_without_loading_torch(tmp_path, args, line):
    """The runtime's options were checked after importing its coordinator: every refusal loaded torch (~1.5 CPU-s,
    seconds on a busy machine) to print one line."""
    code = ("import atexit, runpy, sys; atexit.register(lambda: print('torch' in sys.modules)); "
            "sys.argv = ['dlsched', *sys.argv[1:]]; runpy.run_module('dlsched.cli', run_name='__main__')")
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not start')\n")   # there: only the option is bad
    r = subprocess.run([sys.executable, "-c", code, "train", "--job-dir", str(tmp_path / "job"), *args, "--", "python",
                        str(tmp_path / "train.py")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert (r.returncode, r.stderr.strip(), r.stdout) == (2, line, "False\n"), r


def test_a_script_given_without_the_dashes_says_how_to_run_it(tmp_path):
    """`dlsched train train.py` said "--entry 'train.py': expected 'path/to/file.py:make_job'", an option
    dlsched train does not have, and not how to run a script."""
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not start')\n")
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "--job-dir", str(tmp_path / "job"),
                        str(tmp_path / "train.py")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stderr == (f"error: {tmp_path}/train.py: a script runs after '--' (dlsched train "
                                              f"-- python {tmp_path}/train.py); an entry names its factory "
                                              "(file.py:make_job)\n"), r.stderr[-500:]


def test_an_entry_and_a_script_after_the_dashes_is_one_line_naming_both(tmp_path):
    """`dlsched train x.py:make_job -- python y.py` said "command: 'x.py:make_job' not found on PATH"."""
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "--job-dir", str(tmp_path / "job"),
                        "examples/mlp.py:make_job", "--", "python", "y.py"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stderr == ("error: 'examples/mlp.py:make_job' and a script after '--': give one "
                                              "(an entry file.py:make_job, or the script: dlsched train -- python "
                                              "x.py)\n"), r.stderr[-500:]
    assert not (tmp_path / "job").exists()


def test_a_script_that_trains_no_step_says_so_not_step_none(tmp_path):
    """`dlsched train -- python examples/mlp.py` (a make_job module, no loop) ended 'finished at step None'."""
    (tmp_path / "plain.py").write_text("print('no dlsched.torch here')\n")
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "--job-dir", str(tmp_path / "job"),
                        "--", "python", str(tmp_path / "plain.py")], capture_output=True, text=True, timeout=120,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr[-500:]
    assert "without a training step" in r.stdout and "step None" not in r.stdout, r.stdout


def test_train_on_a_finished_jobs_folder_says_so(tmp_path):
    """A second `dlsched train --job-dir D` on a finished job printed nothing at all (exit 0)."""
    script = REPO / "tests" / "torch" / "user_script.py"
    cmd = [sys.executable, "-m", "dlsched.cli", "train", "--job-dir", str(tmp_path / "job"), "--", "python",
           str(script), "--samples", "16", "--epochs", "1"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert first.returncode == 0 and "finished at step 2" in first.stdout, first.stdout + first.stderr[-1000:]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert again.returncode == 0, again.stderr[-1000:]
    assert f"{tmp_path / 'job'}: already finished at step 2 (" in again.stdout and "nothing to train" in again.stdout
    # another script on that folder: it said "already finished" too (or, mid-run, would load the other's checkpoint)
    other = subprocess.run([*cmd[:cmd.index("--") + 1], "python", str(REPO / "examples" / "mlp.py")],
                           capture_output=True, text=True, timeout=300, cwd=REPO)
    assert other.returncode == 2 and other.stderr == (
        f"error: {tmp_path / 'job'}: its job trains {script}, not {REPO / 'examples' / 'mlp.py'}; give this one "
        "another --job-dir\n"), other.stdout + other.stderr[-1000:]
    assert json.loads((tmp_path / "job" / "status.json").read_text())["state"] == "finished"   # its record kept


@pytest.mark.parametrize("strategy", ["allreduce", "ps"])
def test_a_spec_trains_at_its_lr_at_its_batch_size_as_the_service_does(tmp_path, strategy):
    """The service passes a spec's batch_size as the batch its lr is given at (--reference-batch-size);
    `dlsched train --spec` did not, so a spec with lr 0.05 at batch_size 64 trained at 0.2 (mlp's own batch is 16),
    and a ps job ignored the reference batch under the service too."""
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({"name": "s", "entry": "examples/mlp.py:make_job", "batch_size": 64,
                                "params": {"lr": 0.05, "num_samples": 128}, "strategy": strategy,
                                "gpus": 2 if strategy == "ps" else 1}))
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "--spec", str(spec), "--job-dir",
                        str(tmp_path / "job")], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-1000:]
    steps = [x for x in map(json.loads, (tmp_path / "job" / "progress.jsonl").read_text().splitlines())
             if "event" not in x]
    assert steps and {(x["batch_size"], x["lr"]) for x in steps} == {(64, 0.05)}, steps


@pytest.mark.parametrize("args, line", [
    # each was ignored without a word: an all-reduce job trained dense, a ps job started no spare, ...
    (("--sparse",), "error: --sparse: a parameter-server option, not for --strategy allreduce; add --strategy ps"),
    (("--sync", "ssp:2"), "error: --sync ssp:2: a parameter-server option, not for --strategy allreduce; add "
                          "--strategy ps"),
    (("--servers", "2"), "error: --servers 2: a parameter-server option, not for --strategy allreduce; add "
                         "--strategy ps"),
    (("--strategy", "ps", "--standby", "2"), "error: --standby 2: not for --strategy ps (a ps job adds workers at a "
                                             "round boundary, no spare prepared)"),
    (("--strategy", "ps", "--batch-mode", "fixed-local"), "error: --batch-mode fixed-local: not for --strategy ps (a "
                                                          "ps job keeps its global batch and splits it over its workers)"),
    (("--strategy", "ps", "--ckpt-every", "0"), "error: --ckpt-every 0: not for --strategy ps (a ps job commits a "
                                                "round every N global batches; give N >= 1)"),   # was 10, unsaid
    (("--strategy", "ps", "--batch-size", "-4"), "error: --batch-size -4: must be >= 1"),   # was a traceback
    (("--strategy", "ps", "--batch-size", "0"), "error: --batch-size 0: must be >= 1"),   # was the job's batch
    (("--strategy", "ps", "--record-samples"), "error: --record-samples: not for --strategy ps (a ps job records "
                                               "each batch's samples in ps/records/)"),
    (("--max-restarts", "-1"), "error: --max-restarts -1: must be >= 0"),
    # was trained dense without a word: the MLP has no embedding table
    (("--strategy", "ps", "--sparse"), "error: --sparse: examples/mlp.py:make_job's model has no embedding table "
                                       "(nn.Embedding or EmbeddingBag), whose rows alone would travel; drop --sparse"),
    (("--max-workers", "4"), "error: --max-workers 4: an autoscale option; add --autoscale (or drop it)"),
    (("--autoscale", "--sparse"), "error: --sparse: a parameter-server option, not for --strategy allreduce; add "
                                  "--strategy ps"),
])
def test_an_option_the_strategy_has_no_use_for_is_refused_in_one_line(tmp_path, args, line):
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "examples/mlp.py:make_job", "--job-dir",
                        str(tmp_path / "job"), *args], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip() == line, r.stderr[-500:]
    assert not (tmp_path / "job" / "logs").exists() and not (tmp_path / "job" / "ps").exists()   # nothing started


@pytest.mark.parametrize("args, line", [
    # was taken: the first decision divided by the 0 s and the run ended in a ZeroDivisionError traceback
    (("--utility", "5:0"), "error: --utility '5:0': VALUE and SECONDS must be > 0 (worth VALUE now, 0 at SECONDS)"),
    (("--utility", "-5:10"), "error: --utility '-5:10': VALUE and SECONDS must be > 0 (worth VALUE now, 0 at "
                             "SECONDS)"),
    # was "out of range", not saying against what
    (("--workers", "4", "--max-workers", "2"), "error: --max-workers 2: must be >= --workers (4)"),
    (("--threshold", "2"), "error: --threshold 2.0: must be in [0, 1]"),
])
def test_an_autoscale_option_out_of_its_range_is_one_line_saying_the_range(tmp_path, args, line):
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "examples/mlp.py:make_job", "--job-dir",
                        str(tmp_path / "job"), "--autoscale", *args], capture_output=True, text=True, timeout=120,
                       cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip() == line, r.stderr[-500:]
    assert not (tmp_path / "job" / "logs").exists()   # nothing started


def test_a_ps_folder_is_refused_to_another_job_and_to_all_reduce_and_a_finished_one_says_so(tmp_path):
    """A ps run on an all-reduce job's folder (or the reverse) started over in it, mixing both runs' records; another
    entry on a ps folder failed 4 times over a 'foreign checkpoint'; a finished ps job run again logged a second
    `finished`."""
    def train(entry, *args):
        return subprocess.run([sys.executable, "-m", "dlsched.cli", "train", entry, "--job-dir", str(tmp_path / "job"),
                               "--param", "num_samples=64", *args], capture_output=True, text=True, timeout=300,
                              cwd=REPO)

    first = train("examples/mlp.py:make_job", "--strategy", "ps")
    assert first.returncode == 0, first.stdout[-1000:] + first.stderr[-1000:]
    again = train("examples/mlp.py:make_job", "--strategy", "ps")
    assert again.returncode == 0 and f"{tmp_path / 'job'}: already finished at step 4; nothing to train" in again.stdout
    events = [json.loads(x).get("event") for x in (tmp_path / "job" / "progress.jsonl").read_text().splitlines()]
    assert events.count("finished") == 1
    other = train("examples/mlp.py:make_job")
    assert other.returncode == 2 and other.stderr == (f"error: {tmp_path / 'job'}: its job trains with --strategy ps, "
                                                      "not allreduce; give this one another --job-dir\n"), other.stderr
    another = train("examples/embedding.py:make_job", "--strategy", "ps")
    assert another.returncode == 2 and another.stderr == (
        f"error: {tmp_path / 'job'}: its job trains examples/mlp.py:make_job, not examples/embedding.py:make_job; "
        "give this one another --job-dir\n"), another.stderr
    assert json.loads((tmp_path / "job" / "status.json").read_text())["state"] == "finished"   # its record kept


def test_train_passes_the_runtimes_audit_and_recovery_options_on(tmp_path):
    """`dlsched train` had no --record-samples, --max-restarts, --no-replace-stragglers or --threads: documented
    runtime options a user reached only through `python -m dlsched.train.run`."""
    job = tmp_path / "job"
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "examples/mlp.py:make_job", "--job-dir",
                        str(job), "--param", "num_samples=128", "--param", "epochs=1", "--batch-size", "32",
                        "--record-samples", "--max-restarts", "0", "--no-replace-stragglers", "--threads", "1"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-800:]
    assert any((job / "samples").iterdir())   # the per-step sample ids, written only with --record-samples


def test_a_spec_takes_param_workers_and_batch_overrides_and_refuses_the_options_it_sets(tmp_path):
    """`dlsched train --spec job.yaml --workers 2` trained at the spec's gpus without a word; --param and
    --batch-size were dropped the same way. They override the spec as `dlsched submit`'s do; an option the spec
    sets that is no override (--strategy, --sync, ...) is one line."""
    from dlsched.train.progress_log import read_progress

    spec = tmp_path / "job.yaml"
    spec.write_text("name: m\nentry: examples/mlp.py:make_job\ngpus: 1\nbatch_size: 32\n"
                    "params: {num_samples: 256, epochs: 1}\n")
    base = [sys.executable, "-m", "dlsched.cli", "train", "--spec", str(spec)]
    r = subprocess.run([*base, "--strategy", "ps", "--job-dir", str(tmp_path / "no")], capture_output=True,
                       text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip() == (f"error: --strategy and --spec {spec}: the spec sets it; give it "
                                                      "in the spec, or drop --spec"), r.stderr
    job = tmp_path / "job"
    r = subprocess.run([*base, "--workers", "2", "--param", "num_samples=128", "--batch-size", "64", "--job-dir",
                        str(job)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-800:]
    steps = [s for s in read_progress(job) if "event" not in s]
    assert {s["workers"] for s in steps} == {2} and {s["batch_size"] for s in steps} == {64}
    assert steps[-1]["samples"] == 128


def test_a_script_that_is_not_there_is_one_line_before_any_folder_or_worker(tmp_path):
    """`dlsched train -- python nosuch.py` made the job folder, started a worker and failed it: two lines, the
    worker's own and 'worker 0 exited 2'. `submit` refuses the same script up front; so does train now."""
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "--job-dir", str(tmp_path / "job"), "--", "python",
                        "nosuch.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == ("error: dlsched train: field command: script 'nosuch.py' not found "
                                              f"(relative paths resolve under {tmp_path})\n"), r.stderr[-500:]
    assert not (tmp_path / "job").exists()
