"""train/script.run_forked: a script forked from a process that has torch and numpy loaded draws as a fresh
interpreter would, not the parent's next numbers (every rank of a job, forked from one forkserver, drew the same)."""
import subprocess
import sys

FORKS_A_SCRIPT = '''
import multiprocessing as mp, sys
import numpy as np
import torch
from dlsched.train.script import run_forked
script, log = sys.argv[1], sys.argv[2]
np.random.rand()   # numpy seeds its global RNG at its first draw: a module the forkserver preloads drew once
p = mp.get_context("fork").Process(target=run_forked, args=([sys.executable, script], log, {}))
p.start()
p.join()
print(repr(float(np.random.rand())), repr(torch.rand(1).item()))   # the draws a child that kept the parent's state makes first
'''


def test_a_forked_script_does_not_draw_its_parents_torch_or_numpy_numbers(tmp_path):
    script, log = tmp_path / "draw.py", tmp_path / "draw.log"
    script.write_text("import numpy as np, torch\nprint(repr(float(np.random.rand())), repr(torch.rand(1).item()))\n"
                      "print(open('/proc/self/cmdline').read())\n")
    parent = subprocess.run([sys.executable, "-c", FORKS_A_SCRIPT, str(script), str(log)], check=True,
                            capture_output=True, text=True, timeout=120).stdout.strip()
    draws, title = log.read_text().splitlines()
    child = draws.split()
    assert len(child) == 2 and all(c != p for c, p in zip(child, parent.split(), strict=True))
    # and ps shows it as the command it runs, not its parent's
    assert title.startswith(f"{sys.executable} {script}"), title
