"""train/forking.py: a forked child never collects the garbage it inherits (it ran in a fresh interpreter: a test
process holds garbage of its own), and a worker forked from the local forkserver inherits what a trainer imports
lazily and the modules of every user of the forkserver (the launcher's worker, FLEET's profiling rank), whichever
was imported last."""
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
import importlib, json, multiprocessing, sys
from dlsched.train.forking import LAZY_TRAINING_MODULES as LAZY
# what each user has its forkserver preload: the launcher its workers' module, FLEET's profiling its own
PRELOADS = {"dlsched.train.launcher": "dlsched.train.worker", "dlsched.train.fleet_profile": "dlsched.train.fleet_profile"}
def report(q):   # a spawned server's child imports this file again as __mp_main__: nothing above imports a user
    q.put({"preloaded": [m for m in [*LAZY, *sorted(PRELOADS.values())] if m in sys.modules]})
if __name__ == "__main__":
    assert not [m for m in LAZY if m in sys.modules], "imported before the server starts: the test would prove nothing"
    for name in sys.argv[2:]:   # each adds to the forkserver's preload as it is imported, as a coordinator's does
        importlib.import_module(name)
    from dlsched.train import worker_forkserver
    worker_forkserver.start_shielded(fork=sys.argv[1] == "fork")   # fork: the server has what this process has
    ctx = multiprocessing.get_context("forkserver")
    q = ctx.Queue()
    p = ctx.Process(target=report, args=(q,))
    p.start()
    print(json.dumps(q.get(timeout=60)))
    p.join()
'''


def test_a_forked_worker_inherits_what_its_first_optimizer_would_import_and_every_user_module(tmp_path):
    from dlsched.train.forking import LAZY_TRAINING_MODULES
    probe = tmp_path / "probe.py"
    probe.write_text(WORKER_INHERITS)
    out = subprocess.run([sys.executable, str(probe), "fork", "dlsched.train.launcher"], check=True, timeout=120,
                         capture_output=True, text=True)
    assert json.loads(out.stdout.splitlines()[-1]) == {"preloaded": [*LAZY_TRAINING_MODULES, "dlsched.train.worker"]}
    # a server started afresh imports only its preload list: every user's module is on it, not only the last one
    # imported's (each set the whole list; one order shows it, ~7 CPU-s a run)
    out = subprocess.run([sys.executable, str(probe), "spawn", "dlsched.train.fleet_profile", "dlsched.train.launcher"],
                         check=True, timeout=120, capture_output=True, text=True)
    preloaded = [*LAZY_TRAINING_MODULES, "dlsched.train.fleet_profile", "dlsched.train.worker"]
    assert json.loads(out.stdout.splitlines()[-1]) == {"preloaded": preloaded}
    assert "torch._dynamo" in LAZY_TRAINING_MODULES   # torch.optim.Optimizer.__init__ imports it (torch/_compile.py)
