"""train/forking.py: a forked child never collects the garbage it inherits (it ran in a fresh interpreter: a test
process holds garbage of its own)."""
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
