import pytest

from dlsched.documents import read_yaml_file
from dlsched.errors import UserError


def test_bad_yaml_names_file_and_line(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("a: 1\nb: [\n")
    with pytest.raises(UserError, match=r"x\.yaml: line \d+: invalid YAML"):
        read_yaml_file(f)


def test_missing_and_non_utf8_files_are_one_line(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        read_yaml_file(tmp_path / "nope.yaml")
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(UserError, match="not UTF-8"):
        read_yaml_file(f)


def test_hostile_yaml_files_are_one_line(tmp_path):
    for name, text, needle in [("bomb.yaml", "a: &a [x]\nb: [*a, *a]\n", "aliases"),
                               ("deep.yaml", "[" * 5000 + "]" * 5000, "nested deeper than"),
                               ("dup.yaml", "a: 1\na: 2\n", "duplicate key 'a'")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(UserError, match=needle) as e:
            read_yaml_file(tmp_path / name)
        assert str(e.value).startswith(str(tmp_path / name))


def test_plain_shows_numpy_scalars_as_the_numbers_they_hold():
    """`must be > 0, got np.float64(-1.0)`: a value read through pandas/numpy, shown with repr in a user's message."""
    import numpy as np

    from dlsched.errors import plain

    assert repr(plain(np.float64(-1.0))) == "-1.0" and repr(plain(np.int64(-3))) == "-3"
    assert repr(plain((np.float64(0.5), [np.int32(2)], {"a": np.bool_(True)}))) == "(0.5, [2], {'a': True})"
    assert plain("x") == "x" and plain(None) is None and plain(np.arange(2)).tolist() == [0, 1]
