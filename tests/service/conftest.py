import sys
from pathlib import Path

import httpx
import pytest

from tests.service import policies  # noqa: F401  (registers test-fifo / test-elastic)
from dlsched.service.server import Service
from dlsched.spec import load_cluster_spec
from tests.service.teardown import stop_service_and_jobs

CONTRACT_JOB = Path(__file__).resolve().parents[1] / "backends" / "contract_job.py"
RUNTIME = [sys.executable, str(CONTRACT_JOB)]


def job_yaml(name="j", gpus=1, max_gpus=None, samples=320, epochs=1, step_s=0.02, extra="") -> str:
    mx = f"max_gpus: {max_gpus}\n" if max_gpus else ""
    return (f"name: {name}\nentry: x.py:make_job\ngpus: {gpus}\n{mx}batch_size: 32\n"
            f"params: {{samples: {samples}, epochs: {epochs}, step_s: {step_s}}}\n{extra}")


def cluster(policy="test-fifo", slots=(2, 2), interval=0.2):
    nodes = ", ".join(f"{{name: n{i}, gpus: {g}}}" for i, g in enumerate(slots))
    return load_cluster_spec(f"nodes: [{nodes}]\npolicy: {policy}\ninterval_s: {interval}")


@pytest.fixture
def service(tmp_path):
    """A real service (uvicorn on a free loopback port, SQLite in tmp_path, local backend running the contract job)."""
    svc = Service(cluster(), tmp_path / "state", port=0, runtime=RUNTIME).start()
    yield svc
    stop_service_and_jobs(svc)


@pytest.fixture
def client(service):
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=30) as c:
        yield c
