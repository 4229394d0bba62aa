"""``dlsched simulate``: every bad option value is one line naming the option and the value, exit 2, before any
simulated time passes (run in-process through the CLI's own ``main``: the checks come before any simulation)."""
import sys

import pytest

from dlsched.cli import main

PHILLY = ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:00:00,100,2,200,x\n"
          "2017-10-09 07:00:30,50,1,50,x\n")
POLLUX = "name,time,application,num_replicas,batch_size\nj1,0,cifar10,1,128\n"


def _simulate(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["dlsched", "simulate", *args])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    return e.value.code, out.err.strip()


def _assert_one_line_error(tmp_path, monkeypatch, capsys, args, expected):
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), *args)
    assert code == 2 and err.count("\n") == 0 and err.startswith(f"error: {expected}"), err


@pytest.mark.parametrize("args, expected", [
    (("--interval", "nan"), "--interval: nan"),            # was a ValueError traceback
    (("--interval", "inf"), "--interval: inf"),            # was a table of inf/nan JCTs, exit 0
    (("--restart-penalty", "-5"), "--restart-penalty: -5"),  # was accepted: jobs progressed before they started
    (("--restart-penalty", "nan"), "--restart-penalty: nan"),  # was a simulation that never ended
    (("--horizon", "nan"), "--horizon: nan"),              # was a ValueError traceback
    (("--horizon", "inf"), "--horizon: inf"),              # was an OverflowError traceback
    (("--horizon", "0"), "--horizon: 0"),                  # was a table of 0 finished jobs, exit 0
    (("--horizon", "-10"), "--horizon: -10"),
    (("--limit", "0"), "--limit: 0"),                      # was the whole trace, silently
    (("--limit", "-5"), "--limit: -5"),                    # was one row, silently
    (("--seed", "-1"), "--seed: -1"),                      # was a numpy ValueError traceback
    (("--gpu-speed", "generic=inf"), "--gpu-speed: bad entry 'generic=inf'"),  # was accepted: 0% GPU util
    (("--remaining", "noise:inf"), "--remaining: bad value 'noise:inf'"),    # was accepted
    (("--node-spec", "2x4:a:b"), "--node-spec: bad entry '2x4:a:b'"),        # was a GPU type 'a:b'
    (("--node-spec", "2x4:v100/x"), "--node-spec: bad entry '2x4:v100/x'"),  # --gpu-speed could not name it
    # was "gpu_speed: entry a100=2.0 needs a GPU type of the cluster", printed after the run had begun
    (("--gpu-speed", "a100=2"), "--gpu-speed: 'a100' is not a GPU type of the cluster (generic); --node-spec names"),
    (("--node-spec", "1x4:v100", "--gpu-speed", "v100=2,k80/ncf=1"), "--gpu-speed: 'k80' is not a GPU type"),
])
def test_bad_option_value_is_one_line_naming_it(tmp_path, monkeypatch, capsys, args, expected):
    _assert_one_line_error(tmp_path, monkeypatch, capsys, args, expected)


@pytest.mark.parametrize("option, value, extra", [("--interval", "-2.5", ()), ("--restart-penalty", "-1.5", ()),
                                                   ("--horizon", "nan", ()),
                                                   ("--seed", "-2", ("--remaining", "noise:0.3"))])
def test_the_numeric_options_state_simconfigs_own_rule_naming_the_option(tmp_path, monkeypatch, capsys, option, value,
                                                                         extra):
    """The command checked these four itself (check_number), a copy of SimConfig's rules that could drift from
    them; it now asks SimConfig's rules and words the same rule in its option's name."""
    from dlsched.errors import UserError
    from dlsched.sim.engine import SimConfig

    field = option[2:].replace("-", "_")
    with pytest.raises(UserError) as refused:
        SimConfig(**{field: float(value) if field != "seed" else int(value)})
    rule = str(refused.value).split(" must be ")[1].rsplit(", got ", 1)[0]   # "a finite number > 0 seconds"
    _assert_one_line_error(tmp_path, monkeypatch, capsys, (option, value, *extra), f"{option}: {value} is not {rule}")


def test_limit_on_a_trace_it_does_not_apply_to_is_an_error(tmp_path, monkeypatch, capsys):
    """--limit reads the first rows of a Philly trace; on a Pollux workload it was silently ignored."""
    w = tmp_path / "w.csv"
    w.write_text(POLLUX)
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--limit", "1")
    assert code == 2 and err.count("\n") == 0 and "limit: 1" in err and "Philly" in err


def test_a_directory_is_not_called_missing(tmp_path, monkeypatch, capsys):
    code, err = _simulate(monkeypatch, capsys, "-w", str(tmp_path))
    assert code == 2 and err == f"error: {tmp_path}: is a directory, not a workload file"


def test_valid_limit_still_runs(tmp_path, monkeypatch, capsys):
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--limit", "1", "--cluster-gpus", "4", "-p", "fifo",
                          "--json", "--restart-penalty", "0")
    assert code == 0, err


def test_report_files_carry_the_printed_table(tmp_path, monkeypatch, capsys):
    """summary.csv and report.md lacked the table's 'remaining' column (the information the policies had) and
    report.md named neither the workload nor the cluster: a report from --remaining oracle read like one from
    predicted."""
    import csv
    import io

    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    args = ("-w", str(w), "-p", "fifo", "-p", "srtf", "--cluster-gpus", "4", "--remaining", "oracle")
    code, err = _simulate(monkeypatch, capsys, *args, "--csv", "--report", str(tmp_path / "rep"))
    assert code == 0, err
    monkeypatch.setattr(sys, "argv", ["dlsched", "simulate", *args, "--csv"])
    with pytest.raises(SystemExit):
        main()
    printed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    written = list(csv.DictReader((tmp_path / "rep" / "summary.csv").open()))
    assert [{k: v for k, v in row.items() if k != "jobs"} for row in written] == printed
    assert [row["remaining"] for row in printed] == ["none (not read)", "oracle"]   # FIFO reads none
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.startswith("# w.csv, 1 node / 4 GPUs (remaining work: oracle; not read by fifo)") and "| oracle" in md
    assert written[0]["cluster"] == "1 node / 4 GPUs" and "**workload**: the trace simulated" in md   # its run too


@pytest.mark.parametrize("args, expected", [
    (("--node-spec", "1x2:a", "--cluster-gpus", "64"), "--cluster-gpus: 64 and --node-spec '1x2:a': choose one"),
    (("--node-spec", "1x2:a", "--nodes", "3"), "--nodes: 3 and --node-spec '1x2:a': choose one"),
    (("--node-spec", "1x2:a", "--gpus-per-node", "8"), "--gpus-per-node: 8 and --node-spec '1x2:a': choose one"),
    (("--cluster-gpus", "8", "--nodes", "3"), "--cluster-gpus: 8 and --nodes 3: choose one"),
    (("--seed", "3"), "--seed: 3 applies to --remaining noise:SIGMA only"),
])
def test_an_option_another_overrides_is_an_error_not_ignored(tmp_path, monkeypatch, capsys, args, expected):
    """Each of these ran, the first option silently ignored (the node spec or --cluster-gpus set the cluster; the
    seed drives only the noise mode's error)."""
    _assert_one_line_error(tmp_path, monkeypatch, capsys, args, expected)


def test_defaults_beside_a_node_spec_or_noise_seed_still_run(tmp_path, monkeypatch, capsys):
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--node-spec", "1x2:a", "--csv", "-p", "fifo")
    assert code == 0, err
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--cluster-gpus", "4", "--gpus-per-node", "2",
                          "--remaining", "noise:0.3", "--seed", "3", "--csv", "-p", "srtf")
    assert code == 0, err


def test_report_folder_that_cannot_be_made_is_one_line_before_the_run(tmp_path, monkeypatch, capsys):
    """--report at a file (or below one) was a FileExistsError / NotADirectoryError traceback after the whole
    simulation had run."""
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    f = tmp_path / "afile"
    f.write_text("")
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--report", str(f))
    assert code == 2 and err == f"error: --report: '{f}' is a file, not a folder"
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--report", str(f / "sub"))
    assert code == 2 and err == f"error: --report: cannot create folder '{f / 'sub'}': Not a directory"


@pytest.mark.parametrize("args, expected", [
    (("--gpu-speed", "generic=2,generic=3"), "--gpu-speed: 'generic' is given twice"),   # 3 won, silently
    (("-p", "fifo", "-p", "fifo"), "--policy: 'fifo' is given twice"),   # two rows, one jobs-fifo.csv
    # the workload was read and "--placement bogus has no effect on fifo" printed first, then an unnamed error
    (("-p", "fifo", "--placement", "bogus"), "--placement: 'bogus' is not one of most-free | consolidated | best-fit"),
])
def test_an_entry_given_twice_is_an_error(tmp_path, monkeypatch, capsys, args, expected):
    _assert_one_line_error(tmp_path, monkeypatch, capsys, args, expected)


def test_placement_a_policy_ignores_is_said(tmp_path, monkeypatch, capsys):
    """--placement best-fit ran fifo/goodput/fleet unchanged (they place their own jobs) and said nothing."""
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "-p", "fifo", "-p", "optimus", "-p", "goodput",
                          "--placement", "best-fit", "--csv")
    assert code == 0 and "--placement best-fit has no effect on fifo, goodput: they place their own jobs" in \
        " ".join(err.split())
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "-p", "optimus", "--placement", "best-fit", "--csv")
    assert code == 0 and "no effect" not in err


def test_gpu_types_without_a_speed_are_said_to_run_alike(tmp_path, monkeypatch, capsys):
    """'--node-spec 1x4:v100,1x4:k80' without --gpu-speed simulated both types at speed 1.0 and said nothing."""
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--node-spec", "1x4:v100,1x4:k80", "-p", "fifo", "--csv")
    assert code == 0 and "no factor for GPU type(s) k80, v100: they run at 1.0" in " ".join(err.split())
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "--node-spec", "1x4:v100,1x4:k80", "-p", "fifo", "--csv",
                          "--gpu-speed", "v100=2,k80=0.5")
    assert code == 0 and "no factor" not in err


def test_a_job_larger_than_the_cluster_is_one_line_or_skipped_with_skip_bad(tmp_path, monkeypatch, capsys):
    """Philly has 128-GPU jobs: on the default 64 GPUs the run stopped, and --skip-bad could not skip them."""
    w = tmp_path / "w.csv"
    w.write_text(PHILLY + "2017-10-09 07:01:00,60,128,7680,x\n")
    monkeypatch.setattr(sys, "argv", ["dlsched", "simulate", "-w", str(w), "-p", "fifo"])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    # the file named, before anything is printed (the engine's check said 'job philly-7: ...' after the run began)
    assert e.value.code == 2 and out.out == "", out
    assert out.err == f"error: {w}: job philly-4: requests 128 GPUs, the cluster has 64 (--skip-bad skips such jobs)\n"
    monkeypatch.setattr(sys, "argv", ["dlsched", "simulate", "-w", str(w), "-p", "fifo", "--skip-bad", "--csv"])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    assert "skipped 1 bad row(s); first: job" in out.err and "requests 128 GPUs" in out.err
    assert "2 jobs from" in out.err and out.out.splitlines()[1].split(",")[:2] == ["fifo", "2"], out.out


def test_skip_bad_writes_every_skipped_row_to_the_report_folder(tmp_path, monkeypatch, capsys):
    w, out = tmp_path / "w.csv", tmp_path / "report"
    w.write_text(PHILLY + "2017-10-09 07:01:00,60,128,7680,x\nnot a time,1,1,1,x\n")
    monkeypatch.setattr(sys, "argv", ["dlsched", "simulate", "-w", str(w), "-p", "fifo", "--skip-bad",
                                      "--report", str(out)])
    with pytest.raises(SystemExit) as e:
        main()
    printed = capsys.readouterr()
    said = " ".join((printed.out + printed.err).split())   # the table's console: stdout, wrapped to its width
    assert e.value.code == 0 and "skipped 2 bad row(s)" in said and "skipped.txt" in said, said
    lines = (out / "skipped.txt").read_text().splitlines()
    assert len(lines) == 2 and any("requests 128 GPUs" in line for line in lines), lines


def test_fleet_on_ordinary_jobs_says_what_it_gives_them(tmp_path, monkeypatch, capsys):
    """fleet plans ensembles: an ordinary job gets at most one node's GPUs. On Pollux workload 1 its row read
    like the others' (29.5 % GPU util, 32-GPU imagenet jobs on 4 GPUs for 200 000 s) and nothing said why."""
    w = tmp_path / "w.csv"
    w.write_text("timestamp,duration,num_gpus\n0,1000,8\n")
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "-p", "fleet", "-p", "fifo", "--nodes", "2", "--json",
                          "--report", str(tmp_path / "rep"))
    assert code == 0 and ("fleet plans ensembles (FLEET, MLSys'20): a job that is not one is a flotilla member on at "
                          "most one node's GPUs, whatever it requests") in " ".join(err.split()), err
    assert "fifo plans" not in err
    import csv

    most = {p: max(int(r["gpus_allocated"]) for r in csv.DictReader(open(tmp_path / "rep" / f"timeline-{p}.csv")))
            for p in ("fleet", "fifo")}
    assert most == {"fleet": 4, "fifo": 8}   # what the line says: one node's 4 GPUs, not the 8 requested


def test_node_spec_names_every_node_apart():
    """Types named like another type plus an index ('a' and 'a1') gave two nodes the name 'a10'."""
    from dlsched.commands.simulate import parse_nodes

    cluster = parse_nodes("1x4:a1,11x4:a")
    assert len({n.name for n in cluster.nodes}) == 12 and cluster.total_gpus == 48


def test_a_report_folder_reused_keeps_no_file_of_the_earlier_report(tmp_path, monkeypatch, capsys):
    """A second run into the same --report folder with fewer policies (and no bad rows) left the first run's
    jobs-srtf.csv, timeline-srtf.csv and skipped.txt beside the new report.md, as if they were its."""
    w, rep = tmp_path / "w.csv", tmp_path / "rep"
    w.write_text(PHILLY + "2017-10-09 07:01:00,0,1,0,x\n")
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "-p", "fifo", "-p", "srtf", "--skip-bad",
                          "--report", str(rep))
    assert code == 0 and (rep / "jobs-srtf.csv").is_file() and (rep / "skipped.txt").is_file(), err
    (rep / "jobs-mine.csv").write_text("not the report's\n")
    w.write_text(PHILLY)
    code, err = _simulate(monkeypatch, capsys, "-w", str(w), "-p", "fifo", "--csv", "--report", str(rep))
    assert code == 0, err
    assert sorted(p.name for p in rep.iterdir()) == ["gpu_allocation.png", "jct_cdf.png", "jobs-fifo.csv",
                                                     "jobs-mine.csv", "report.md", "summary.csv",
                                                     "timeline-fifo.csv"]
    assert "removed 3 file(s) of an earlier report" in " ".join(err.split())


def test_the_cluster_is_counted_in_singular_and_plural():
    from dlsched.commands.simulate import _nodes
    from dlsched.policy.base import ClusterView, NodeView

    assert _nodes(ClusterView((NodeView("n0", 1),))) == "1 node / 1 GPU"
    assert _nodes(ClusterView((NodeView("n0", 4), NodeView("n1", 4)))) == "2 nodes / 8 GPUs"
