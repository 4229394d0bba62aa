"""The node table behind ``dlsched nodes``: health from the backend's live nodes, jobs from placements."""
from tests.waiting import wait_until
from dlsched.policy.base import NodeView
from dlsched.service.nodes import LOST, UP, NodeWatch


def test_a_node_the_backend_stops_listing_is_lost_until_it_comes_back():
    a, b = NodeView("a", 2, "h100"), NodeView("b", 1, "h100")
    watch = NodeWatch([a, b])
    assert watch.update([a, b], {"a": "10.0.0.1", "b": "10.0.0.2"}, [(7, {"a": 2}), (8, {"a": 0, "b": 1})], 1.0) == []
    assert [(r.name, r.address, r.slots, r.used, r.health, r.jobs) for r in watch.table] == [
        ("a", "10.0.0.1", 2, 2, UP, (7, 8)), ("b", "10.0.0.2", 1, 1, UP, (8,))]
    assert watch.update([a], {"a": "10.0.0.1"}, [(7, {"a": 2})], 5.0) == [("b", LOST)]
    lost = watch.table[1]
    assert (lost.health, lost.since, lost.address, lost.jobs) == (LOST, 5.0, "10.0.0.2", ())
    assert watch.lost() == {"b"}
    assert watch.update([a, b], {}, [], 9.0) == [("b", UP)]
    assert watch.lost() == frozenset()


def test_a_declared_node_never_seen_live_is_reported_lost_at_once():
    watch = NodeWatch([NodeView("a", 1), NodeView("b", 1)])
    assert watch.update([NodeView("a", 1)], {}, [], 0.0) == [("b", LOST)]


def test_the_service_lists_its_nodes_with_address_slots_and_jobs(service, client):
    from tests.service.conftest import job_yaml

    r = client.post("/jobs", content=job_yaml(samples=100_000, step_s=0.05), headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    rows = wait_until(lambda: (n := client.get("/nodes").json()["nodes"]) and any(x["jobs"] for x in n) and n, 30,
                      "the job on a node")
    assert {x["name"]: (x["address"], x["slots"], x["health"]) for x in rows} == {
        "n0": ("localhost", 2, "up"), "n1": ("localhost", 2, "up")}
    assert [x["jobs"] for x in rows if x["jobs"]] == [[job]]
    assert all(not n["lost"] for n in client.get("/dashboard/api/overview").json()["nodes"])
