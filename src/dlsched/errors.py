"""User-facing errors: printed by the CLI as one line naming the file/row/field and the value, exit code 2."""


class UserError(Exception):
    """Bad input from the user (file, row, field, value). Never shown with a traceback."""



class JobFailed(RuntimeError):
    """The job's own code failed for good (its workers died, restarts spent): the runtime prints it as one line,
    exit 1; the worker logs hold the traceback."""
