"""train/forking.py: a forked child never collects the garbage it inherits (it ran in a fresh interpreter: a test
process holds garbage of its own), and a worker forked from the local forkserver inherits what a trainer imports
lazily."""
import json
import subprocess
import sys

CHILD_COLLECTS = '''
import gc, multiprocessing as mp, os, sys
from dlsched.train.forking import inheriting_no_garbage
class Inherited:
    def __del__(self):
        with open(sys.argv[1], "a") as f:
            f.write("parent\\n" if os.getpid() == PARENT else "child\\n")
def child():
    gc.collect()
PARENT = os.getpid()
gc.disable()   # garbage when the child is forked, as a long-lived process's next full collection may come after
cycle = {"garbage": Inherited()}
cycle["self"] = cycle
del cycle
p = mp.get_context("fork").Process(target=child)
if sys.argv[2] == "guarded":
    with inheriting_no_garbage():
        p.start()
else:
    p.start()
p.join()
gc.collect()
'''


def test_garbage_is_collected_before_the_fork_and_never_in_the_child(tmp_path):
    for mode, collected in (("guarded", ["parent"]), ("plain", ["child", "parent"])):   # plain: the hazard itself
        said = tmp_path / mode
        subprocess.run([sys.executable, "-c", CHILD_COLLECTS, str(said), mode], check=True, timeout=120)
        assert said.read_text().splitlines() == collected, mode


WORKER_INHERITS = '''
import json, multiprocessing, sys
import dlsched.train.launcher  # noqa: F401  (sets the forkserver's preload, as a coordinator's import does)
from dlsched.train import worker_forkserver
def report(q):
    q.put({"preloaded": [m for m in LAZY if m in sys.modules]})
if __name__ == "__main__":
    from dlsched.train.forking import LAZY_TRAINING_MODULES as LAZY
    assert not [m for m in LAZY if m in sys.modules], "imported before the server starts: the test would prove nothing"
    worker_forkserver.start_shielded(fork=True)
    ctx = multiprocessing.get_context("forkserver")
    q = ctx.Queue()
    p = ctx.Process(target=report, args=(q,))
    p.start()
    print(json.dumps(q.get(timeout=60)))
    p.join()
'''


def test_a_forked_worker_inherits_what_its_first_optimizer_would_import(tmp_path):
    from dlsched.train.forking import LAZY_TRAINING_MODULES
    probe = tmp_path / "probe.py"
    probe.write_text(WORKER_INHERITS)
    out = subprocess.run([sys.executable, str(probe)], check=True, timeout=120, capture_output=True, text=True)
    assert json.loads(out.stdout.splitlines()[-1]) == {"preloaded": list(LAZY_TRAINING_MODULES)}
    assert "torch._dynamo" in LAZY_TRAINING_MODULES   # torch.optim.Optimizer.__init__ imports it (torch/_compile.py)
