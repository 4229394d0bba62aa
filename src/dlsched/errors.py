"""User-facing errors: printed by the CLI as one line naming the file/row/field and the value, exit code 2."""


class UserError(Exception):
    """Bad input from the user (file, row, field, value). Never shown with a traceback."""

