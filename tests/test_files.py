"""Input resolution: bad inputs become warnings, never crashes."""

import os

import pytest

from diagnoser.collect.files import list_sources, looks_binary, open_source


def test_missing_paths_warn_and_the_rest_is_read(tmp_path):
    (tmp_path / "rank0.log").write_text("x\n")
    sources, warnings = list_sources([str(tmp_path), str(tmp_path / "nope")])
    assert [s.name for s in sources] == ["rank0.log"]
    assert warnings == [(str(tmp_path / "nope"), "no such file or directory")]


def test_symlink_loop_is_reported_not_followed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rank0.log").write_text("x\n")
    os.symlink(tmp_path, tmp_path / "a" / "loop")
    sources, warnings = list_sources([str(tmp_path)])
    assert [s.name for s in sources] == ["a/rank0.log"]
    assert any("symlink loop" in m for _, m in warnings)


def test_broken_symlink_is_a_warning(tmp_path):
    os.symlink(tmp_path / "gone", tmp_path / "dangling.log")
    sources, warnings = list_sources([str(tmp_path)])
    assert sources == [] and "broken" in warnings[0][1]


def test_same_file_twice_is_read_once(tmp_path):
    f = tmp_path / "rank0.log"
    f.write_text("x\n")
    sources, _ = list_sources([str(f), str(tmp_path)])
    assert len(sources) == 1


def test_binary_files_are_refused_with_a_reason(tmp_path):
    f = tmp_path / "core.log"
    f.write_bytes(bytes(range(256)) * 64)
    (source,), _ = list_sources([str(f)])
    with pytest.raises(ValueError, match="binary"):
        open_source(source)
    assert not looks_binary(b"log line with a stray \x00 NUL\n" * 20)


def test_fifo_is_a_warning_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / "pipe.log")
    (tmp_path / "rank0.log").write_text("x\n")
    sources, warnings = list_sources([str(tmp_path)])
    assert [s.name for s in sources] == ["rank0.log"]
    assert "not a regular file" in warnings[0][1]


def test_unreadable_file_is_a_warning_and_the_rest_is_triaged(tmp_path, monkeypatch):
    """Tests run as root, where chmod 000 does not stop reads: inject the EACCES open() would raise."""
    import builtins

    from diagnoser.triage import triage

    (tmp_path / "secret.log").write_text("x\n")
    (tmp_path / "rank0.log").write_text("[rank0]:KeyError: 'input_ids'\n")
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        if str(file).endswith("secret.log"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    d = triage([str(tmp_path)], workers=1)
    assert d.category.value == "user_code"
    assert [(w.source, w.message) for w in d.warnings] == [("secret.log", "Permission denied")]
