"""``GET /metrics``: Prometheus's text format over real HTTP, from a real service scheduling real job processes."""
import re
from pathlib import Path
from types import SimpleNamespace

import httpx
import yaml
from prometheus_client import Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dlsched.policy.base import NodeView
from dlsched.service.loop import RoundStats
from dlsched.service.metrics import ServiceCollector, metrics_registry
from dlsched.service.store import Store
from dlsched.spec import JobSpec, load_job_spec
from tests.service.conftest import job_yaml
from tests.waiting import wait_until

YAML = {"content-type": "application/yaml"}
NODES = (NodeView("n0", 2, "slot"), NodeView("n1", 2, "slot"))


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, (label, value) pairs sorted): value} of an exposition, as Prometheus would parse it."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(client) -> dict[tuple, float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version="), r.text
    return samples(r.text)


def collected(collector: ServiceCollector) -> dict[tuple, float]:
    return samples(generate_latest(metrics_registry(collector)).decode())


def test_metrics_count_jobs_slots_rounds_and_events_and_follow_a_job_until_it_ends(service, client):
    long = client.post("/jobs", content=job_yaml("long", samples=10**6, step_s=0.05), headers=YAML).json()["id"]
    short = client.post("/jobs", content=job_yaml("short", samples=64), headers=YAML).json()["id"]
    m = wait_until(lambda: (s := scrape(client))[("dlsched_jobs", (("state", "finished"),))] == 1
                   and s[("dlsched_jobs", (("state", "running"),))] == 1 and s, timeout=60, what="short done, long running")
    job = (("job", str(long)), ("name", "long"))
    assert m[("dlsched_job_gpus", job)] == 1 and m[("dlsched_job_submit_timestamp_seconds", job)] > 0
    assert m[("dlsched_job_state", (*job, ("state", "running")))] == 1
    assert not any(dict(labels).get("job") == str(short) for _, labels in m)   # an ended job leaves the per-job series
    assert not any(name.startswith("dlsched_job_target") for name, _ in m)     # no target stated: no series
    assert m[("dlsched_jobs", (("state", "queued"),))] == 0 == m[("dlsched_jobs", (("state", "failed"),))]
    assert m[("dlsched_cluster_slots", ())] == 4 and m[("dlsched_cluster_slots_allocated", ())] == 1
    assert {labels: v for (name, labels), v in m.items() if name == "dlsched_node_up"} == {
        (("node", "n0"),): 1, (("node", "n1"),): 1}
    assert m[("dlsched_node_slots", (("gpu_type", "slot"), ("node", "n0")))] == 2
    assert m[("dlsched_rounds_total", ())] > 0 and m[("dlsched_round_failures_total", ())] == 0
    assert m[("dlsched_last_round_seconds", (("phase", "decide"),))] >= 0
    assert m[("dlsched_round_duration_seconds_count", ())] >= m[("dlsched_rounds_total", ())] - 1   # read one after the other
    assert m[("dlsched_round_duration_seconds_bucket", (("le", "+Inf"),))] == m[("dlsched_round_duration_seconds_count", ())]
    assert m[("dlsched_build_info", (("policy", "test-fifo"), ("version", "0.1.0")))] == 1
    events = {"submitted": 2, "finished": 1}
    for kind, n in events.items():
        assert m[("dlsched_events_total", (("kind", kind),))] == n, kind
    # counted on from the last scrape: each event once, however often Prometheus scrapes
    wait_until(lambda: scrape(client).get(("dlsched_job_progress_ratio", job), 0) > 0, timeout=60, what="long's progress")
    assert all(scrape(client)[("dlsched_events_total", (("kind", k),))] == n for k, n in events.items())

    client.post(f"/jobs/{long}/cancel")
    m = wait_until(lambda: (s := scrape(client))[("dlsched_jobs", (("state", "cancelled"),))] == 1 and s, timeout=60,
                   what="long cancelled")
    assert not any(name.startswith("dlsched_job_") for name, _ in m)
    assert m[("dlsched_cluster_slots_allocated", ())] == 0 and m[("dlsched_events_total", (("kind", "submitted"),))] == 2


def test_metrics_need_the_token(service):
    assert httpx.get(f"{service.url}/metrics").status_code == 401


def test_a_lost_node_is_down_and_its_slots_leave_the_clusters_and_no_loop_means_no_round_series(tmp_path):
    store = Store(tmp_path / "state.db")
    store.submit(load_job_spec(job_yaml("queued"), "spec"))
    # its latest refit says where its stated target stands (service/metric_target.py stores it so)
    aim = {"metric": "val_accuracy", "target": 0.93, "target_step": 900.0, "target_time": 2e9, "target_chance": 0.7,
           "target_step_80": [800.0, 1100.0], "target_time_80": [2e9 - 600, 2e9 + 1200]}
    store.add_prediction(1, 1e9, 0.1, 1000.0, None, None, {"model": "annealing", "metric_target": aim})
    m = collected(ServiceCollector(store, lambda: NODES, lost=lambda: frozenset({"n1"})))
    assert m[("dlsched_node_up", (("node", "n1"),))] == 0 and m[("dlsched_node_up", (("node", "n0"),))] == 1
    assert m[("dlsched_cluster_slots", ())] == 2 and m[("dlsched_jobs", (("state", "queued"),))] == 1
    assert m[("dlsched_job_submit_timestamp_seconds", (("job", "1"), ("name", "queued")))] > 0
    assert [labels for name, labels in m if name == "dlsched_job_state"] == [(("job", "1"), ("name", "queued"),
                                                                              ("state", "queued"))]
    aimed = (("job", "1"), ("metric", "val_accuracy"), ("name", "queued"))
    assert (m[("dlsched_job_target", aimed)], m[("dlsched_job_target_chance", aimed)],
            m[("dlsched_job_target_predicted_timestamp_seconds", aimed)]) == (0.93, 0.7, 2e9)
    assert (m[("dlsched_job_target_early_timestamp_seconds", aimed)],
            m[("dlsched_job_target_late_timestamp_seconds", aimed)]) == (2e9 - 600, 2e9 + 1200)   # its 80 % band
    assert not any(name.startswith("dlsched_round") for name, _ in m)
    assert not any(name == "dlsched_job_target_pending" for name, _ in m)
    # past its predicted final value (a digits run predicted to end at 0.925): target_time is the budget's, no
    # predicted crossing; the series said it as one
    store.add_prediction(1, 1e9 + 60, 0.2, 1000.0, None, None, {"model": "annealing", "metric_target": aim | {
        "final": 0.925, "target_chance": 0.35, "target_step_80": None, "target_time_80": None,
        "target_beyond_final": True}})
    m = collected(ServiceCollector(store, lambda: NODES, lost=lambda: frozenset({"n1"})))
    assert m[("dlsched_job_target_chance", aimed)] == 0.35
    assert ("dlsched_job_target_predicted_timestamp_seconds", aimed) not in m
    store.close()


def test_a_stated_target_not_predicted_yet_has_a_pending_series_beside_a_predicted_target_loss(tmp_path):
    """The API lists a stated target of a reported metric that cannot be predicted yet as ``target_pending``;
    /metrics had no series for it (an alert on a target left unpredicted had nothing to read)."""
    store = Store(tmp_path / "state.db")
    jid = store.submit(JobSpec(name="evals", command=["python", "t.py"], gpus=1, prediction={
        "target_loss": 1.8, "target": {"metric": "val_accuracy", "value": 0.93, "kind": "accuracy"}}))
    waiting = ("dlsched_job_target_pending", (("job", str(jid)), ("metric", "val_accuracy"), ("name", "evals")))
    assert collected(ServiceCollector(store, lambda: NODES))[waiting] == 0.93     # before the first refit too
    store.add_prediction(jid, 1.0, 0.1, 25600.0, None, None, {
        "target_loss": 1.8, "target_step": None, "target_time": None, "target_chance": 0.03,
        "metric_target_missing": {"metric": "val_accuracy", "target": 0.93, "why": "no point yet"}})
    m = collected(ServiceCollector(store, lambda: NODES))
    assert m[waiting] == 0.93
    assert m[("dlsched_job_target_chance", (("job", str(jid)), ("metric", "loss"), ("name", "evals")))] == 0.03
    store.add_prediction(jid, 2.0, 0.1, 25600.0, None, None, {"metric_target": {
        "metric": "val_accuracy", "target": 0.93, "target_step": 900.0, "target_chance": 0.7}})
    m = collected(ServiceCollector(store, lambda: NODES))
    assert waiting not in m and m[(waiting[0][:-8], waiting[1])] == 0.93   # predicted now: dlsched_job_target
    store.close()


def test_the_example_alert_rules_read_only_metrics_the_service_exports(tmp_path):
    """examples/monitoring: both files parse, and every dlsched_* name an alert reads is in a scrape (a renamed
    metric would leave an alert that never fires)."""
    folder = Path(__file__).resolve().parents[2] / "examples" / "monitoring"
    config = yaml.safe_load((folder / "prometheus.yml").read_text())
    assert config["scrape_configs"][0]["metrics_path"] == "/metrics" and config["rule_files"] == ["alerts.yml"]
    exprs = [r["expr"] for g in yaml.safe_load((folder / "alerts.yml").read_text())["groups"] for r in g["rules"]]
    store = Store(tmp_path / "state.db")
    store.submit(load_job_spec(job_yaml("aimed"), "spec"))
    store.add_prediction(1, 1e9, 0.1, 1000.0, None, None, {"metric_target": {
        "metric": "val_accuracy", "target": 0.9, "target_step": None, "target_chance": 0.1}})
    store.update(1, stalled_since=1e9)   # a series present only while a job is stalled (service/stalls.py)
    store.submit(JobSpec(name="evals", command=["python", "t.py"], gpus=1,       # a target not predicted yet
                         prediction={"target": {"metric": "val_accuracy", "value": 0.93, "kind": "accuracy"}}))
    loop = SimpleNamespace(rounds=1, failed_rounds=0, last_stats=RoundStats(0.0, 0.1, 0.1, 0.1, 1, ()),
                           round_seconds=Histogram("dlsched_round_duration_seconds", "rounds", registry=None))
    exported = {name for name, _ in collected(ServiceCollector(store, lambda: NODES, loop_thread=loop))}
    read = {name for e in exprs for name in re.findall(r"\bdlsched_\w+", e)}
    assert read and read <= exported, read - exported
    store.close()


def test_the_own_bands_errors_are_counted_per_pool(tmp_path):
    """dlsched_own_band_errors: how many finished jobs' errors each pool of the cluster's own bands holds
    (service/own_calibration.py), so an operator sees when a fraction's band became the cluster's own."""
    from dlsched.service.job_models import JobModels

    store = Store(tmp_path / "state.db")
    models = JobModels(("slot",), store)
    models.bands.add("loss", [[0.1, "fit", 0.2], [0.25, "carried", -0.1]])
    models.bands.add("loss", [[0.1, "fit", 0.1]])
    models.bands.add("error", [[0.5, "fit", 0.3]], [[0.25, "fit", -0.2]])   # and a stated target's steps error
    loop = SimpleNamespace(rounds=1, failed_rounds=0, last_stats=None, loop=SimpleNamespace(models=models),
                           round_seconds=Histogram("dlsched_round_duration_seconds", "rounds", registry=None))
    m = collected(ServiceCollector(store, lambda: NODES, loop_thread=loop))
    assert {labels: v for (name, labels), v in m.items() if name == "dlsched_own_band_errors"} == {
        (("fraction", "0.1"), ("kind", "loss"), ("table", "fit")): 2,
        (("fraction", "0.25"), ("kind", "loss"), ("table", "carried")): 1,
        (("fraction", "0.5"), ("kind", "error"), ("table", "fit")): 1}
    assert {labels: v for (name, labels), v in m.items() if name == "dlsched_own_steps_band_errors"} == {
        (("fraction", "0.25"), ("kind", "error"), ("table", "fit")): 1}
    store.close()
