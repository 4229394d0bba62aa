"""What a process a Ray actor hosts saw at its start (``--ray-worker tests.backends.hosted_probe``): whether torch was
loaded before it ran (forked from its node's server) and its real parent; then it exits with ``--exit`` or sleeps."""
import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    torch_at_start = "torch" in sys.modules
    ap = argparse.ArgumentParser()
    ap.add_argument("--job-dir")
    ap.add_argument("--worker-id")
    ap.add_argument("--out", required=True)
    ap.add_argument("--exit", type=int)
    a = ap.parse_args(argv)
    tmp = Path(a.out + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "torch_at_start": torch_at_start}))
    os.replace(tmp, a.out)
    if a.exit is not None:
        sys.exit(a.exit)
    time.sleep(600)
