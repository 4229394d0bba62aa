import pytest

from dlsched.errors import UserError, read_yaml_file


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
