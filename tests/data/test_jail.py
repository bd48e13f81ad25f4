"""The runs folder is a jail; uploads live in a per-server folder with a quota.

The defect: with ROLL_VIZ_RUNS set, a symlink inside it (to a file, or a folder such as
``completions/``), the folder itself (``dump=dir:`` or ``dir:.``) and a symlink loop were
followed, content from outside was shown, a private text file's contents were quoted in a
message; with the temp folder reached through a symlink (macOS) every upload was refused.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from roll_viz.data.runs import RunFormatError, open_run
from roll_viz.data.runs.jail import JailError, RunsJail, public_message
from roll_viz.data.runs.uploads import PREFIX, UploadStore, clean_stale

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
SECRET = "password=hunter2 do not show"


@pytest.fixture
def tree(tmp_path):
    """runs/ with a good CSV run, and outside it a private file and a folder of run files."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(FIXTURES / "plain" / "samples.csv", runs / "good.csv")
    private = tmp_path / "private"
    private.mkdir()
    (private / "secret.csv").write_text(SECRET + "\n")
    (private / "notes.txt").write_text(SECRET + "\n")
    outside_runs = tmp_path / "elsewhere"
    outside_runs.mkdir()
    shutil.copy(FIXTURES / "plain" / "samples.csv", outside_runs / "0.csv")
    return runs, private, outside_runs


def _no_leak(message: str, *paths: Path) -> None:
    assert SECRET not in message
    assert "hunter2" not in message
    for p in paths:
        assert str(p) not in message
        assert str(p.resolve()) not in message


def test_a_good_run_opens(tree):
    runs, _, _ = tree
    jail = RunsJail(runs)
    run = open_run(jail.resolve("good.csv"), jail=jail)
    assert run.steps


@pytest.mark.parametrize("name", ["", ".", "./", "a/..", " "])
def test_the_folder_itself_is_refused(tree, name):
    runs, _, _ = tree
    (runs / "a").mkdir()
    with pytest.raises(JailError, match="itself"):
        RunsJail(runs).resolve(name)


@pytest.mark.parametrize("name", ["../private/secret.csv", "/etc/passwd", "good.csv/../../x"])
def test_names_that_leave_are_refused(tree, name):
    runs, private, _ = tree
    with pytest.raises(JailError) as err:
        RunsJail(runs).resolve(name)
    _no_leak(str(err.value), runs, private)


def test_a_symlink_to_a_file_outside_is_refused_without_quoting_it(tree):
    runs, private, _ = tree
    (runs / "link.csv").symlink_to(private / "secret.csv")
    (runs / "notes.txt").symlink_to(private / "notes.txt")
    jail = RunsJail(runs)
    for name in ("link.csv", "notes.txt"):
        with pytest.raises(JailError, match="outside") as err:
            jail.resolve(name)
        _no_leak(str(err.value), runs, private)
    assert not jail.contains(runs / "link.csv")


def test_a_symlinked_completions_folder_is_left_out(tree):
    runs, _, outside_runs = tree
    run = runs / "run1"
    run.mkdir()
    (run / "completions").symlink_to(outside_runs, target_is_directory=True)
    shutil.copy(FIXTURES / "plain" / "samples.csv", run / "inside.csv")
    (run / "link.csv").symlink_to(outside_runs / "0.csv")
    jail = RunsJail(runs)
    opened = open_run(jail.resolve("run1"), jail=jail)
    assert [Path(f).name for f in opened.files] == ["inside.csv"]  # not 0.csv from outside
    assert any("lead outside" in n for n in opened.notes)
    # a folder whose every entry leads outside opens nothing
    only = runs / "run2"
    only.mkdir()
    (only / "completions").symlink_to(outside_runs, target_is_directory=True)
    with pytest.raises(RunFormatError) as err:
        open_run(jail.resolve("run2"), jail=jail)
    _no_leak(public_message(err.value, jail), runs, outside_runs)
    assert public_message(err.value, jail).startswith("run2: ")


def test_a_symlinked_folder_outside_is_refused(tree):
    runs, _, outside_runs = tree
    (runs / "away").symlink_to(outside_runs, target_is_directory=True)
    with pytest.raises(JailError, match="outside"):
        RunsJail(runs).resolve("away")
    with pytest.raises(JailError):
        RunsJail(runs).resolve("away/0.csv")


def test_a_symlink_loop_is_refused(tree):
    runs, _, _ = tree
    (runs / "loop_a").symlink_to(runs / "loop_b")
    (runs / "loop_b").symlink_to(runs / "loop_a")
    (runs / "self").symlink_to(runs / "self")
    jail = RunsJail(runs)
    for name in ("loop_a", "self", "missing.csv"):
        with pytest.raises(JailError, match=r"loop|missing"):
            jail.resolve(name)
    assert not jail.contains(runs / "loop_a")


def test_a_link_inside_the_folder_is_fine_and_the_folder_may_be_a_link(tree, tmp_path):
    runs, _, _ = tree
    (runs / "alias.csv").symlink_to(runs / "good.csv")
    via = tmp_path / "via"
    via.symlink_to(runs, target_is_directory=True)  # the folder reached through a link
    jail = RunsJail(via)
    assert jail.resolve("alias.csv") == (runs / "good.csv").resolve()
    assert open_run(jail.resolve("good.csv"), jail=jail).steps


def test_an_unknown_file_is_not_quoted(tree):
    runs, _, _ = tree
    (runs / "private.csv").write_text(SECRET + "\n")
    jail = RunsJail(runs)
    with pytest.raises(RunFormatError) as err:
        open_run(jail.resolve("private.csv"), jail=jail)
    message = public_message(err.value, jail)
    _no_leak(message, runs)
    assert message.startswith("private.csv:1: ")


def test_os_errors_show_no_path(tmp_path):
    err = FileNotFoundError(2, "No such file or directory", str(tmp_path / "x"))
    message = public_message(err)
    assert str(tmp_path) not in message
    assert "No such file" in message


# ---------------------------------------------------------------- uploads


def _csv() -> bytes:
    return (FIXTURES / "plain" / "samples.csv").read_bytes()


def test_uploads_work_through_a_symlinked_temp_folder(tmp_path):
    real_tmp = tmp_path / "private_tmp"
    real_tmp.mkdir()
    tmp = tmp_path / "tmp"
    tmp.symlink_to(real_tmp, target_is_directory=True)  # as /tmp -> /private/tmp on macOS
    store = UploadStore(parent=tmp)
    rel = store.save("samples.csv", _csv(), holder="s1")
    path = store.resolve(rel)
    assert path.is_file()
    assert real_tmp.resolve() in path.parents
    assert open_run(path, jail=store.jail).steps
    assert store.root.name == f"{PREFIX}-{os.getpid()}"  # one folder per server process


def test_upload_quota_and_release(tmp_path):
    data = _csv()
    store = UploadStore(parent=tmp_path, quota=int(len(data) * 1.5), grace_s=0)
    rel = store.save("a.csv", data, holder="s1")
    other = data + b"\n"
    with pytest.raises(ValueError, match="upload space"):
        store.save("b.csv", other, holder="s2")  # s1 still holds a.csv
    assert store.save("a.csv", data, holder="s2") == rel  # the same content is shared
    store.release("s1")
    assert store.resolve(rel).is_file()  # s2 still holds it
    store.release("s2")
    with pytest.raises(JailError, match="missing"):
        store.resolve(rel)  # freed when its last session ended
    assert store.save("b.csv", other, holder="s3")  # the space is back


def test_released_uploads_wait_for_the_grace_period(tmp_path):
    store = UploadStore(parent=tmp_path, grace_s=3600)
    rel = store.save("a.csv", _csv(), holder="s1")
    store.release("s1")
    assert store.purge() == []  # a reconnecting session takes it back within the grace
    assert store.resolve(rel, holder="s1b").is_file()
    store.release("s1b")
    assert store.save("b.csv", _csv() + b"\n", holder="s2")
    store.quota = store.used_bytes()  # full: a new save removes what nobody holds
    store.save("c.csv", _csv()[:-5], holder="s3")
    with pytest.raises(JailError):
        store.resolve(rel)


def test_stale_upload_folders_are_cleaned_at_start_up(tmp_path):
    dead = tmp_path / f"{PREFIX}-999999999"
    (dead / "abc").mkdir(parents=True)
    shared = tmp_path / PREFIX  # the machine-wide folder older versions used
    (shared / "abc").mkdir(parents=True)
    alive = tmp_path / f"{PREFIX}-{os.getppid()}"
    alive.mkdir()
    unrelated = tmp_path / f"{PREFIX}-notes"
    unrelated.mkdir()
    assert sorted(clean_stale(tmp_path)) == sorted([dead.name, shared.name])
    assert alive.exists()
    assert unrelated.exists()
    store = UploadStore(parent=tmp_path)
    assert store.root.exists()


def test_upload_names_and_sizes(tmp_path):
    store = UploadStore(parent=tmp_path)
    with pytest.raises(ValueError, match="ending in"):
        store.save("evil.sh", b"x", holder="s")
    rel = store.save("../../etc/x y.csv", _csv(), holder="s")
    assert rel.endswith("/x_y.csv")
    assert store.root in store.resolve(rel).parents
