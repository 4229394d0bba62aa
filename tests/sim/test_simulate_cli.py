import json
import subprocess
import sys

from dlsched.paths import REPO_ROOT


def _cli(*args, columns=200):
    return subprocess.run([sys.executable, "-m", "dlsched.cli", "simulate", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT / "src"), "COLUMNS": str(columns),
                                              "PATH": "/usr/bin:/bin"})


def test_simulate_compares_policies_and_writes_report(tmp_path):
    w = tmp_path / "w.csv"
    w.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:00:00,100,2,200,x\n"
                 "2017-10-09 07:00:30,50,1,50,x\n2017-10-09 07:01:00,20,1,20,x\n")
    r = _cli("--workload", str(w), "-p", "fifo", "-p", "srtf", "--cluster-gpus", "2", "--gpus-per-node", "2",
             "--report", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    assert "fifo" in r.stdout and "srtf" in r.stdout and "avg JCT" in r.stdout
    for f in ("summary.csv", "jobs-fifo.csv", "jct_cdf.png", "gpu_allocation.png"):
        assert (tmp_path / "rep" / f).stat().st_size > 0


def test_simulate_bad_input_is_one_line(tmp_path):
    w = tmp_path / "w.csv"
    w.write_text("name,time,application,num_replicas,batch_size\na,soon,cifar10,1,128\n")
    r = _cli("--workload", str(w))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "w.csv:2: field 'time'" in r.stderr
    r = _cli("--workload", str(w), "-p", "nope")
    assert r.returncode == 2 and "unknown policy 'nope'" in r.stderr


PHILLY = ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:00:00,100,2,200,x\n"
          "2017-10-09 07:00:30,50,1,50,x\n2017-10-09 07:01:00,20,1,20,x\n")


def test_gzipped_trace_at_80_columns_json_csv_and_markdown_report(tmp_path):
    import csv
    import gzip
    import io
    import json

    w = tmp_path / "w.csv.gz"
    w.write_bytes(gzip.compress(PHILLY.encode()))
    common = ("--workload", str(w), "-p", "fifo", "-p", "tiresias", "-p", "srtf", "--cluster-gpus", "2",
              "--gpus-per-node", "2")
    r = _cli(*common, "--report", str(tmp_path / "rep"), columns=80)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout and "tiresias" in r.stdout and all(len(ln) <= 80 for ln in r.stdout.splitlines())
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| policy" in md and "|:--" in md and "| tiresias" in md
    rows = json.loads(_cli(*common, "--json", columns=80).stdout)
    assert [x["policy"] for x in rows] == ["fifo", "tiresias", "srtf"] and rows[0]["finished"] == 3
    # each row says which run it came from: a saved comparison had no trace, cluster or options
    context = {"workload": str(w), "trace_jobs": 3, "cluster": "1 node / 2 GPUs", "cluster_gpus": 2,
               "interval": 60.0, "restart_penalty": 30.0, "placement": "most-free", "horizon": None}
    assert all({k: x[k] for k in context} == context for x in rows), rows
    table = list(csv.DictReader(io.StringIO(_cli(*common, "--csv", columns=80).stdout)))
    assert [x["policy"] for x in table] == ["fifo", "tiresias", "srtf"]
    assert table[0]["workload"] == str(w) and table[0]["cluster_gpus"] == "2" and table[-1]["horizon"] == ""


def test_undecodable_trace_is_one_line(tmp_path):
    w = tmp_path / "w.csv"
    w.write_bytes(b"timestamp,duration\n\xff\xfe\x00,1\n")
    r = _cli("--workload", str(w))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "is not UTF-8" in r.stderr
    w.write_bytes(b"\x1f\x8b\x08\x00garbage")
    r = _cli("--workload", str(w))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "gzip data is damaged" in r.stderr


def test_remaining_defaults_to_predicted_and_names_its_mode(tmp_path):
    """A duration-only trace (Philly, one's own) has no epochs to predict from: its jobs are told nothing, and the
    table said "predicted" over an SRTF that ran as FIFO. The label and a note say so; trace jobs stay "predicted"."""
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    r = _cli("--workload", str(w), "-p", "srtf", "--cluster-gpus", "2", "--gpus-per-node", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["remaining"] == "predicted; none for 3/3 jobs"
    assert "assumed: 3 of 3 jobs are duration-only or ensembles" in " ".join(r.stderr.split())
    r = _cli("--workload", str(w), "-p", "srtf", "--cluster-gpus", "2", "--gpus-per-node", "2", "--json",
             "--remaining", "oracle")
    assert json.loads(r.stdout)[0]["remaining"] == "oracle" and "assumed" not in r.stderr
    w.write_text("name,time,application,num_replicas,batch_size\nj1,0,ncf,1,256\n")
    r = _cli("--workload", str(w), "-p", "srtf", "--json")
    assert json.loads(r.stdout)[0]["remaining"] == "predicted" and "assumed" not in r.stderr, r.stderr
    r = _cli("--workload", str(w), "--remaining", "noise:x")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--remaining: bad value 'noise:x'" in r.stderr


def test_a_pollux_workloads_number_names_the_bundled_trace(tmp_path):
    r = _cli("-w", "3", "-p", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    assert "160 jobs from " in r.stderr and "pollux/workloads/workload-3.csv" in r.stderr
    r = _cli("-w", "workload-9", "-p", "fifo")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "workload-9: no such workload file (or a Pollux workload's number: 1, 2, 3, 4)" in r.stderr


def test_the_table_is_titled_with_the_workload_read_and_wide_shows_every_column():
    """`-w 2` titled its table "2, 16 nodes ..."; `--wide` was "No such option" though the 80-column table said
    "not shown at 80 columns: ..." (now: "--wide shows all", as the other table commands say)."""
    r = _cli("-w", "2", "-p", "fifo", "--horizon", "3600", columns=80)
    assert r.returncode == 0, r.stderr
    titles = [ln for ln in r.stdout.splitlines() if ", 16 nodes / 64 GPUs (remaining work" in ln]
    assert [t.split(",")[0] for t in titles] == ["workload-2.csv"], r.stdout
    assert "not shown at 80 columns: p50 JCT (s), " in r.stdout and "(--wide shows all)" in r.stdout, r.stdout
    wide = _cli("-w", "2", "-p", "fifo", "--horizon", "3600", "--wide", columns=80)
    assert wide.returncode == 0, wide.stderr
    assert "not shown" not in wide.stdout and "p50 JCT" in wide.stdout and "remaining" in wide.stdout, wide.stdout


def test_progress_is_plain_lines_when_stderr_is_no_terminal(tmp_path):
    """Piped (a script, a CI log), the rich bar never drew: the full Philly trace ran for minutes without a word."""
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    r = _cli("--workload", str(w), "-p", "srtf", "-p", "fifo", "--csv")
    assert r.returncode == 0, r.stderr
    done = [ln for ln in r.stderr.splitlines() if " jobs finished, simulated " in ln]
    assert [ln.split(",")[0] for ln in done] == ["srtf: 3/3 jobs finished", "fifo: 3/3 jobs finished"], r.stderr
    assert "jobs finished" not in r.stdout


def test_a_policy_that_reads_no_remaining_work_is_not_labelled_with_the_mode(tmp_path):
    """`--remaining oracle` labelled every row "oracle": FIFO and Tiresias, which never read remaining work, read as
    if they had been told it, beside an SRTF that was."""
    w = tmp_path / "w.csv"
    w.write_text(PHILLY)
    r = _cli("--workload", str(w), "-p", "fifo", "-p", "tiresias", "-p", "srtf", "--cluster-gpus", "2",
             "--gpus-per-node", "2", "--remaining", "oracle", "--json", "--report", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    assert [x["remaining"] for x in json.loads(r.stdout)] == ["none (not read)", "none (not read)", "oracle"]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "'none (not read)': the policy orders jobs without it" in md
    # the title too: a narrow terminal drops the column first
    assert md.startswith("# w.csv, 1 node / 2 GPUs (remaining work: oracle; not read by fifo, tiresias)\n"), md
