import os

from dlsched.paths import SRC, pythonpath_with_src


def test_a_childs_pythonpath_names_src_once_however_deep_the_chain():
    """Backend -> runtime -> Ray worker each added src again; the node's server is chosen by the worker's PYTHONPATH
    (``runtime_forkserver``), so a worker's should not depend on how many starts it went through."""
    once = pythonpath_with_src(os.pathsep.join(["/x", SRC]))
    assert once == pythonpath_with_src(once) == os.pathsep.join([SRC, "/x"])
    assert pythonpath_with_src(None) == pythonpath_with_src(pythonpath_with_src(None)) == SRC
