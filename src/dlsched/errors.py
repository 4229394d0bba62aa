"""User-facing errors: printed by the CLI as one line naming the file/row/field and the value, exit code 2."""


class UserError(Exception):
    """Bad input from the user (file, row, field, value). Never shown with a traceback."""



class JobFailed(RuntimeError):
    """The job's own code failed for good (its workers died, restarts spent): the runtime prints it as one line,
    exit 1; the worker logs hold the traceback."""


def plain(x):
    """``x`` with numpy scalars as the Python numbers they hold, at any depth: a message shows the value a user wrote
    (``-3``), where ``repr(np.int64(-3))`` is ``np.int64(-3)`` (numpy 2)."""
    if type(x).__module__ == "numpy" and hasattr(x, "item") and getattr(x, "ndim", None) == 0:
        return x.item()
    if isinstance(x, dict):
        return {plain(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    return x
