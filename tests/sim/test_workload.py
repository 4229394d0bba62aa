import pytest

from dlsched.errors import UserError
from dlsched.sim import read_gavel, read_philly, read_pollux, read_workload


def test_pollux_reader_reads_shared_workload(data_dir):
    w = read_workload(data_dir / "pollux/workloads/workload-1.csv")
    assert len(w.jobs) == 160 and w.jobs[0].app == "cifar10" and w.jobs[0].batch_size == 2048 and not w.skipped


def test_pollux_bad_row_names_file_line_field(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,128\nb,10,cifar10,two,128\n")
    with pytest.raises(UserError, match=r"w.csv:3: field 'num_replicas' = 'two'"):
        read_pollux(p)
    w = read_pollux(p, skip_bad=True)
    assert [j.id for j in w.jobs] == ["a"] and len(w.skipped) == 1


def test_unknown_application_is_reported(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,num_replicas,batch_size\na,0,gpt9,2,128\n")
    with pytest.raises(UserError, match=r":2: field 'application' = 'gpt9'"):
        read_workload(p)


def test_batch_size_outside_the_traces_is_a_bad_row_that_skip_bad_skips(tmp_path, data_dir):
    """It passed the reader and stopped the simulator with a line naming no file or row, --skip-bad or not."""
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,128\nb,10,cifar10,1,99999\n")
    with pytest.raises(UserError, match=r"w.csv:3: field 'batch_size' = '99999': outside the batch sizes 128..4096"):
        read_workload(p)
    w = read_workload(p, skip_bad=True)
    assert [j.id for j in w.jobs] == ["a"] and len(w.skipped) == 1 and "batch_size" in w.skipped[0]


def test_philly_reader_and_errors(tmp_path, data_dir):
    p = tmp_path / "philly.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,x\n"
                 "2017-10-09 07:00:55,10.0,2,20.0,x\nyesterday,5,1,5,x\n")
    with pytest.raises(UserError, match=r"philly.csv:4: field 'timestamp' = 'yesterday'"):
        read_philly(p)
    w = read_philly(p, skip_bad=True)
    assert [(j.submit_time, j.requested_gpus, j.duration) for j in w.jobs] == [(0.0, 2, 10.0), (60.0, 1, 66.0)]
    assert len(read_philly(data_dir / "philly/philly.csv", limit=100).jobs) == 100


def test_gavel_reader(tmp_path):
    p = tmp_path / "t.trace"
    p.write_text("ResNet-50 (batch size 64)\tpython3 main.py\tdir\t--num_steps\t1\t1000\t2\t1\t-1\t30\n"
                 "LM\tpython3 lm.py\tdir\t--steps\t0\t500\t1\t1\t-1\n")
    with pytest.raises(UserError, match=r"t.trace:2: field 'fields' = 9"):
        read_gavel(p)
    w = read_workload(p, skip_bad=True)
    j = w.jobs[0]
    assert (j.submit_time, j.requested_gpus, j.duration) == (30.0, 2, 1000.0) and len(w.skipped) == 1
    w = read_gavel(p, skip_bad=True, steps_per_second={"ResNet-50 (batch size 64)": 4.0})
    assert w.jobs[0].duration == 250.0


def test_unrecognised_header(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UserError, match="unrecognised workload header"):
        read_workload(p)


def test_row_with_extra_fields_is_bad_and_spaced_header_is_read(tmp_path):
    """An extra field ('j1,0,cifar10,1,128,extra') was dropped silently; a header written 'name, time, ...' was
    recognised as Pollux and then refused as lacking every column but the first."""
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128,extra\nb,0,cifar10,1,128\n")
    with pytest.raises(UserError, match=r"w.csv:2: field 'fields' = 6: expected 5 comma-separated fields"):
        read_workload(p)
    assert [j.id for j in read_workload(p, skip_bad=True).jobs] == ["b"]
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,x,y\n")
    with pytest.raises(UserError, match=r":2: field 'fields' = 6"):
        read_workload(p)
    p.write_text("name, time, application, num_replicas, batch_size\na, 0, cifar10, 1, 128\n")
    assert [(j.id, j.requested_gpus) for j in read_workload(p).jobs] == [("a", 1)]


def test_gavel_steps_taken_as_seconds_is_said(tmp_path, monkeypatch, capsys):
    """A Gavel trace counts steps; without a rate the reader takes them as seconds, and simulate said nothing."""
    import sys

    from dlsched.cli import main

    p = tmp_path / "t.trace"
    p.write_text("ResNet-50 (batch size 64)\tpython3 main.py\tdir\t--num_steps\t1\t1000\t2\t1\t-1\t30\n")
    w = read_workload(p)
    assert len(w.assumed) == 1 and "'ResNet-50 (batch size 64)'" in w.assumed[0] and "1 step/s" in w.assumed[0]
    assert read_gavel(p, steps_per_second={"ResNet-50 (batch size 64)": 4.0}).assumed == []
    monkeypatch.setattr(sys, "argv", ["dlsched", "simulate", "-w", str(p), "-p", "fifo", "--csv"])
    with pytest.raises(SystemExit):
        main()
    assert "assumed:" in capsys.readouterr().err


def test_philly_submit_times_do_not_depend_on_the_machine_time_zone(tmp_path, monkeypatch):
    """Naive timestamps were read in the local zone: across 2017-11-05 (end of US daylight time) a job submitted
    2 h after another came out 3 h after it on a Los Angeles machine, 2 h on a UTC one."""
    import time

    p = tmp_path / "philly.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-11-05 00:00:00,10,1,10,x\n"
                 "2017-11-05 02:00:00,10,1,10,x\n")
    gaps = []
    for tz in ("UTC", "America/Los_Angeles"):
        monkeypatch.setenv("TZ", tz)
        time.tzset()
        gaps.append(read_workload(p).jobs[1].submit_time)
    monkeypatch.delenv("TZ")
    time.tzset()
    assert gaps == [7200.0, 7200.0]


def test_own_trace_odd_rows_are_one_line_each(tmp_path):
    """A cluster's own Philly-style trace: a zero duration became 1 s without a word, a short row read
    "field 'num_gpus' = None", and a gpu_type or job_id column was dropped silently."""
    p = tmp_path / "mine.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2024-01-01 00:00:00,0,2,0,prod\n"
                 "2024-01-01 00:01:00,3600\n2024-01-01 00:02:00,-5,1,-5,prod\n2024-01-01 00:03:00,60,1,60,prod\n")
    with pytest.raises(UserError, match=r"^\S*mine.csv:2: field 'duration' = '0': must be > 0$"):
        read_workload(p)
    w = read_workload(p, skip_bad=True)
    assert [j.duration for j in w.jobs] == [60.0]
    assert w.skipped[1].endswith(":3: field 'fields' = 2: expected 5 comma-separated fields (num_gpus missing)")
    assert w.skipped[2].endswith(":4: field 'duration' = '-5': must be > 0") and len(w.skipped) == 3
    assert w.assumed == []
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster,gpu_type,job_id\n"
                 "2024-01-01 00:00:00,100,1,100,prod,a100,j1\n")
    assert read_workload(p).assumed == [f"{p}: column(s) gpu_type not read: not part of the Philly format "
                                        f"(timestamp, duration, num_gpus, gpu_time, cluster, job_id)"]
    p.write_text("name,time,application,num_replicas,batch_size,gpu_type\na,0,cifar10,1,128,v100\nb,5,cifar10\n")
    w = read_workload(p, skip_bad=True)
    assert [j.id for j in w.jobs] == ["a"] and "gpu_type" in w.assumed[0] and "Pollux format" in w.assumed[0]
    assert w.skipped == [f"{p}:3: field 'fields' = 3: expected 6 comma-separated fields (num_replicas, batch_size "
                         f"missing)"]


def test_a_three_column_trace_with_unix_seconds_is_read(tmp_path):
    """A cluster's own trace of what the Philly reader reads (timestamp, duration, num_gpus) was an 'unrecognised
    workload header' without the unread gpu_time and cluster columns, and a Unix-time timestamp a bad row."""
    p = tmp_path / "mine.csv"
    p.write_text("timestamp,duration,num_gpus\n1704067800,100,1\n2024-01-01 00:00:00,50,2\n1704067260.5,7,1\n")
    w = read_workload(p)
    assert [(j.submit_time, j.duration, j.requested_gpus) for j in w.jobs] == [(0.0, 50.0, 2), (60.5, 7.0, 1),
                                                                                (600.0, 100.0, 1)]
    assert w.assumed == [] and len(read_workload(p, limit=1).jobs) == 1
    p.write_text("timestamp,duration,num_gpus\nnan,100,1\n")
    with pytest.raises(UserError, match=r"mine.csv:2: field 'timestamp' = 'nan': not a date-time"):
        read_workload(p)


def test_a_spreadsheets_quoted_header_is_read_and_a_bad_row_after_a_blank_line_is_named_by_its_line(tmp_path):
    """A quoted header ("timestamp","duration",... with CRLF, as a spreadsheet saves it) was an 'unrecognised
    workload header'; a bad row after a blank line was named by its row count (line 4 for the file's line 5)."""
    p = tmp_path / "mine.csv"
    p.write_bytes(b'\xef\xbb\xbf"timestamp","duration","num_gpus"\r\n"2024-01-01 00:00:00","100","2"\r\n\r\n'
                  b'"2024-01-01 00:01:00","50","1"\r\n')
    assert [(j.submit_time, j.duration) for j in read_workload(p).jobs] == [(0.0, 100.0), (60.0, 50.0)]
    p.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n\nb,0,cifar10,1,128\n,,,,\n")
    with pytest.raises(UserError, match=r"mine.csv:5: field 'name' = '': empty"):
        read_workload(p)
    p.write_text("timestamp,duration,num_gpus\n2024-01-01 00:00:00,100,2\n\n\n2024-01-01 00:01:00,-1,1\n")
    with pytest.raises(UserError, match=r"mine.csv:5: field 'duration' = '-1'"):
        read_workload(p)


def test_a_unix_time_in_milliseconds_is_a_bad_row_naming_the_unit(tmp_path):
    """An export's Unix time in ms (a Java or Prometheus clock) was read as seconds: the second of two jobs a
    minute apart came 60 000 s after the first, and the run said nothing (makespan 60 230 s, GPU util 0.3 %)."""
    p = tmp_path / "mine.csv"
    p.write_text("timestamp,duration,num_gpus\n1710068400000,100,2\n1710068460000,200,4\n")
    with pytest.raises(UserError, match=r"^\S*mine.csv:2: field 'timestamp' = '1710068400000': past year 9999 as "
                                        r"seconds; as milliseconds since 1970 it is 2024-03-10T11:00:00\+00:00"):
        read_workload(p)
    p.write_text("timestamp,duration,num_gpus\n1710068400000000000,100,2\n253402300799,100,2\n")
    w = read_workload(p, skip_bad=True)
    assert "as nanoseconds since 1970 it is 2024-03-10T11:00:00" in w.skipped[0] and len(w.jobs) == 1
    p.write_text("timestamp,duration,num_gpus\n20240310100000,100,2\n")   # YYYYMMDDHHMMSS: no unit to suggest
    with pytest.raises(UserError, match=r"'20240310100000': past year 9999 as seconds; give seconds since 1970 or a "
                                        r"date-time \(YYYY-MM-DD HH:MM:SS\)$"):
        read_workload(p)


def test_a_line_of_spaces_is_a_blank_line(tmp_path):
    """An export's blank line holding spaces or a tab was a bad row ("expected 3 comma-separated fields"), while an
    empty one was skipped; a bad row after it is still named by its own line."""
    p = tmp_path / "mine.csv"
    p.write_text("timestamp,duration,num_gpus\n1000,100,2\n   \n\t\n1030,200,4\n")
    assert [(j.submit_time, j.duration) for j in read_workload(p).jobs] == [(0.0, 100.0), (30.0, 200.0)]
    p.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n  \nb,x,cifar10,1,128\n")
    with pytest.raises(UserError, match=r"mine.csv:4: field 'time' = 'x'"):
        read_workload(p)


def test_own_trace_job_ids_name_the_jobs_and_a_repeated_one_is_a_bad_row(tmp_path):
    """A scheduler export's job_id column was dropped ("not read"): the reports named jobs philly-LINE, and a job
    exported twice (a requeue) was simulated twice without a word."""
    p = tmp_path / "mine.csv"
    p.write_text("job_id,user,timestamp,duration,num_gpus\nj1,al,1000,100,2\nj2,bo,1030,50,1\n\nj1,al,1100,100,2\n")
    with pytest.raises(UserError, match=r"^\S*mine.csv:5: field 'job_id' = 'j1': duplicate job id \(first on line "
                                        r"2\)$"):
        read_workload(p)
    w = read_workload(p, skip_bad=True)
    assert [j.id for j in w.jobs] == ["j1", "j2"] and len(w.skipped) == 1
    assert w.assumed == [f"{p}: column(s) user not read: not part of the Philly format (timestamp, duration, "
                         f"num_gpus, gpu_time, cluster, job_id)"]
    p.write_text("timestamp,duration,num_gpus,name\n1000,100,2, \n")
    with pytest.raises(UserError, match=r"mine.csv:2: field 'name' = ' ': empty"):
        read_workload(p)
    p.write_text("timestamp,duration,num_gpus\n1000,100,2\n1000,100,2\n")
    assert [j.id for j in read_workload(p).jobs] == ["philly-2", "philly-3"]
