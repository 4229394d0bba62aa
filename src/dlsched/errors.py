"""User-facing errors: printed by the CLI as one line naming the file/row/field and the value, exit code 2."""


class UserError(Exception):
    """Bad input from the user (file, row, field, value). Never shown with a traceback."""


def read_yaml_file(path) -> object:
    """A YAML file's document; an unreadable file or bad YAML is one ``UserError`` line naming the file and line."""
    from pathlib import Path

    import yaml

    path = Path(path)
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 (byte {e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise UserError(f"{path}: {where}invalid YAML: {getattr(e, 'problem', None) or e}") from None
