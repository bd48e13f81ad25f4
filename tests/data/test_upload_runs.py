"""Several files or a zip uploaded as one run: one folder, one history; the zip unpacked safely."""

from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest
import torch

from roll_viz.data.runs import open_run, uploads
from tests.data.helpers import FIXTURES

UPLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "uploads"


@pytest.fixture
def store(tmp_path):
    return uploads.UploadStore(parent=tmp_path, quota=50 * 2**20)


def _zip(members: dict[str, bytes], symlinks: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = stat.S_IFLNK | 0o777 if name in symlinks else stat.S_IFREG | 0o644
            info.external_attr = mode << 16
            z.writestr(info, data)
    return buffer.getvalue()


def _same_summaries(a, b) -> None:
    assert a.format == b.format
    assert a.steps == b.steps
    for x, y in zip(a.summaries, b.summaries, strict=True):
        assert torch.equal(x.scores, y.scores)
        assert torch.equal(x.group_ids, y.group_ids)
        assert x.prompts == y.prompts


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_verl_zip_is_one_run_with_every_step(store):
    data = (UPLOADS / "verl_steps.zip").read_bytes()
    rel = store.save_files([("verl_steps.zip", data)], "s1")
    assert rel.endswith("/verl_steps")
    run = open_run(store.resolve(rel), jail=store.jail)
    _same_summaries(run, open_run(FIXTURES / "verl"))
    assert run.steps == (1, 2)


def test_a_trl_zip_keeps_completions_beside_trainer_state(store):
    data = (UPLOADS / "trl_run.zip").read_bytes()
    rel = store.save_files([("trl_run.zip", data)], "s1")
    assert _files_under(store.resolve(rel)) == {
        "trainer_state.json",
        "completions/completions_00010.parquet",
        "completions/completions_00020.parquet",
    }
    run = open_run(store.resolve(rel), jail=store.jail)
    _same_summaries(run, open_run(FIXTURES / "trl"))
    assert "metrics" in run.present  # trainer_state.json was read beside completions/


def test_several_files_are_one_run_like_the_zip(store):
    files = [(name, (FIXTURES / "verl" / name).read_bytes()) for name in ("2.jsonl", "1.jsonl")]
    rel = store.save_files(files, "s1")
    assert rel.endswith("/files_2_files")
    _same_summaries(open_run(store.resolve(rel), jail=store.jail), open_run(FIXTURES / "verl"))
    assert store.save_files(list(reversed(files)), "s2") == rel  # same files, same run


def test_one_plain_file_keeps_its_single_file_id(store):
    data = (FIXTURES / "verl" / "1.jsonl").read_bytes()
    assert store.save_files([("1.jsonl", data)], "s1") == store.save("1.jsonl", data, "s1")


def test_zip_names_cannot_lead_out_of_the_upload(store, tmp_path):
    good = (FIXTURES / "verl" / "1.jsonl").read_bytes()
    data = _zip(
        {
            "../../outside.jsonl": good,
            "/abs/path/2.jsonl": (FIXTURES / "verl" / "2.jsonl").read_bytes(),
            "..\\..\\win.jsonl": good,
            "link.jsonl": b"/etc/passwd",
            "model.pkl": b"\x80\x04K\x01.",
            "run.py": b"print('never run')",
            "__MACOSX/._1.jsonl": b"junk",
            ".hidden.jsonl": good,
        },
        symlinks=("link.jsonl",),
    )
    rel = store.save_files([("evil.zip", data)], "s1")
    folder = store.resolve(rel)
    assert _files_under(folder) == {"outside.jsonl", "2.jsonl", "win.jsonl"}
    everything = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    assert all(str(p).startswith(uploads.PREFIX) for p in everything)
    assert open_run(folder, jail=store.jail).format == "verl"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"not a zip at all", "cannot be read as a zip"),
        (_zip({"notes.txt": b"hello"}), "holds no run file"),
        (_zip({"a/1.jsonl": b"{}", "b/1.jsonl": b"{}"}), "two files named 1.jsonl"),
    ],
)
def test_a_bad_zip_is_refused_with_a_message_and_leaves_nothing(store, data, said):
    with pytest.raises(ValueError, match=said):
        store.save_files([("run.zip", data)], "s1")
    assert _files_under(store.root) == set()


def test_too_many_members_are_refused(store, monkeypatch):
    monkeypatch.setattr(uploads, "MAX_ZIP_MEMBERS", 3)
    data = _zip({f"{k}.jsonl": b"{}" for k in range(4)})
    with pytest.raises(ValueError, match="4 entries, more than 3"):
        store.save_files([("run.zip", data)], "s1")


def test_the_unpacked_size_is_capped_on_declared_and_on_inflated_bytes():
    bomb = _zip({"1.jsonl": b" " * (4 * 2**20)})  # 4 MB of spaces: a few KB zipped
    assert len(bomb) < 64 * 1024
    with pytest.raises(ValueError, match="unpacks to more than"):
        list(uploads.zip_members(bomb, limit=2**20))  # refused on the declared size
    members = uploads.zip_members(bomb, limit=8 * 2**20)
    place, chunks = next(members)
    assert place == "1.jsonl"
    assert sum(len(c) for c in chunks) == 4 * 2**20


def test_a_lying_size_header_stops_at_the_cap(monkeypatch):
    bomb = _zip({"1.jsonl": b"0" * (3 * 2**20)})
    real_infolist = zipfile.ZipFile.infolist

    def lying(self):
        infos = real_infolist(self)
        for info in infos:
            info.file_size = 10  # the header claims 10 bytes
        return infos

    monkeypatch.setattr(zipfile.ZipFile, "infolist", lying)
    # zipfile itself stops at the declared size (then the CRC fails); the inflated-bytes count
    # stops a reader that would not: either way no more than the cap is unpacked
    with pytest.raises(ValueError, match=r"cannot be read|unpacks to more than"):
        _unpack_all(uploads.zip_members(bomb, limit=2**20))


def test_inflated_bytes_are_counted_whatever_the_header_says(monkeypatch):
    data = _zip({"1.jsonl": b"{}"})
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, info: io.BytesIO(b"0" * 3 * 2**20))
    with pytest.raises(ValueError, match="unpacks to more than 1 MB"):
        _unpack_all(uploads.zip_members(data, limit=2**20))


def _unpack_all(members) -> int:
    return sum(len(chunk) for _, chunks in members for chunk in chunks)


def test_a_zip_over_the_quota_is_refused_and_leaves_no_part(tmp_path):
    small = uploads.UploadStore(parent=tmp_path, quota=2**20)
    data = _zip({"1.jsonl": b"{}\n" * 2**19})  # 1.5 MB unpacked
    with pytest.raises(ValueError, match="upload space"):
        small.save_files([("run.zip", data)], "s1")
    assert _files_under(small.root) == set()


def test_a_file_type_no_reader_takes_is_refused(store):
    with pytest.raises(ValueError, match="expected files ending in"):
        store.save_files([("1.jsonl", b"{}"), ("model.pkl", b"\x80\x04.")], "s1")
