import httpx
import pytest

from dlsched.service.server import Service
from tests.service.conftest import RUNTIME, cluster
from tests.service.teardown import stop_service_and_jobs

EVIL = "import pathlib, sys\npathlib.Path(sys.argv[0]).with_name('PWNED').touch()\ndef make_job(**kw):\n    pass\n"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """One real service (auth on, the default) under attack: a job folder ``jobs/`` as the allowed root, and an
    ``evil.py`` outside it. The loop runs every 0.2 s, so anything that slipped through would start."""
    tmp = tmp_path_factory.mktemp("sec")
    (tmp / "jobs").mkdir()
    (tmp / "jobs" / "ok.py").write_text("def make_job(**kw):\n    pass\n")
    (tmp / "outside").mkdir()
    (tmp / "outside" / "evil.py").write_text(EVIL)
    svc = Service(cluster(), tmp / "state", port=0, runtime=RUNTIME, workdir=tmp / "jobs").start()
    yield svc, tmp
    stop_service_and_jobs(svc)


@pytest.fixture
def api(target):
    svc, _ = target
    with httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30) as c:
        yield c
