"""The real local Ray cluster of the Ray tests (test_ray*.py): a head without GPUs and two fake GPU nodes (``gpu_slot``
custom resource, named by the ``dlsched.io/node`` label), and the Ray backend over it. One cluster per test module:
a module's tests run on one pytest-xdist worker (--dist loadfile), so the Ray files run on several workers at once,
each with its own cluster (its own GCS, raylets, ports and session folder)."""
import pytest


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # fast failure detection: a removed node is declared dead within ~1 s instead of ~30 s
    fast = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 250, "health_check_timeout_ms": 250,
            "health_check_failure_threshold": 3}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, "_system_config": fast})
    nodes = {name: c.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": name})
             for name in ("n1", "n2")}
    c.wait_for_nodes()
    yield c, nodes
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def backend(cluster):
    from dlsched.backends.ray import RayBackend
    from tests.backends.ray_cluster import CONTRACT_RUNTIME

    c, _ = cluster
    b = RayBackend(address=c.address, gpu_resource="gpu_slot", runtime=CONTRACT_RUNTIME, ready_timeout_s=20)
    yield b
    b.stop_all()
