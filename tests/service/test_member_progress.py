"""An ensemble's members as measured from the step rows the store keeps (``member``, ``member_step``): where each
stands and its samples/s since its flotillas' plan. Real SQLite; the rows as the FLEET runtime writes them."""
import pytest

from dlsched.service.member_progress import member_progress
from dlsched.service.store import Store
from dlsched.spec import load_job_spec

JOB = "name: e\nkind: ensemble\nentry: dlsched.train.fleet_spec:from_yaml\nparams: {path: e.yaml}\ngpus: 1\n"


def row(t, member, step):
    return {"time": t, "step": step, "samples": 32 * step, "loss": 1.0, "workers": 2, "batch_size": 32,
            "member": member, "member_step": step}


def test_each_running_member_is_measured_since_its_plan(tmp_path):
    store = Store(tmp_path / "s.db")
    job = store.submit(load_job_spec(JOB), now=0.0)
    store.event("job_flotillas", job, 100.5, time=100.0, samples_done={"a": 320, "b": 0, "c": 0},
                flotillas=[{"members": {"a": 1}, "rate": 900.0}, {"members": {"b": 1}, "rate": 900.0}])
    rows = [row(99.0, "a", 5)]                                  # before the plan: its earlier flotilla's
    rows += [row(101.0, "a", 20), row(103.0, "a", 40), row(105.0, "a", 60)]   # 20 steps of 32 every 2 s
    rows += [row(104.0, "b", 30)]                               # one row since the plan: start-up counted in
    rows += [{**row(104.0, "c", 1), "member_step": "x"}, {**row(104.0, "c", 1), "member": 7}]   # job code's junk
    store.add_progress(job, rows, 1)
    m = member_progress(store, job, store.events(job, kinds=("job_flotillas",)))
    assert set(m) == {"a", "b"}
    assert m["a"].samples == 60 * 32 and m["a"].rate == pytest.approx(40 * 32 / 4)   # 320/s, not the 900 planned
    assert m["a"].at(106.0) == pytest.approx(60 * 32 + 320)
    assert m["b"].rate == pytest.approx(30 * 32 / 4)            # from the plan at 100 s to its row at 104 s
    assert member_progress(store, job, []) == {}                # no plan yet: nothing measured
