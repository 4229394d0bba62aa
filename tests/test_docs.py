"""The README and docs/cli.md say what the tool does: the README's commands run exactly as written, and the
CLI reference is the one the CLI generates."""
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from dlsched.cli_reference import render
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def block_after(marker: str) -> str:
    m = re.search(re.escape(f"<!-- {marker} -->") + r"\s*```bash\n(.*?)```", README, re.S)
    assert m, f"README has no ```bash block after <!-- {marker} -->"
    return m.group(1)


def test_cli_reference_is_generated_from_the_cli():
    assert (REPO / "docs" / "cli.md").read_text() == render(), "docs/cli.md is stale: run `make docs`"


def test_readme_opens_with_the_two_commands_and_both_targets_exist():
    first = re.search(r"```\n(.*?)```", README, re.S).group(1)
    assert [ln.split("#")[0].strip() for ln in first.strip().splitlines()] == ["make demo", "make test"]
    for target in ("demo", "test"):
        assert subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True).returncode == 0


def test_readme_tour_runs_exactly_as_written():
    assert not _healthy(), "a dlsched service already answers on 127.0.0.1:8642 (the tour's port): stop it first"
    server_cmd = block_after("tour:server").strip()
    client = block_after("tour:client")
    state = Path("/tmp/dlsched-tour")
    shutil.rmtree(state, ignore_errors=True)
    env = dict(os.environ, COLUMNS="80")
    env.pop("DLSCHED_SERVER", None)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env["PATH"]
    server = subprocess.Popen(["bash", "-c", f"exec {server_cmd}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_until(lambda: _healthy() or server.poll() is not None, 120, "the tour's service to answer")
        assert server.poll() is None, server.stdout.read()
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", client], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "submitted job 1 (tour-r20)" in out.stdout
        assert "tour-r20" in out.stdout and "finished" in out.stdout
        assert "…" not in out.stdout
        assert (state / "report" / "report.md").is_file()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _healthy() -> bool:
    try:
        return httpx.get("http://127.0.0.1:8642/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
