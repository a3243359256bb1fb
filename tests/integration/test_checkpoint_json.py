# SPDX-License-Identifier: Apache-2.0
"""`--json` on the checkpoint commands a script reads: each output is parsed
and held against the text output of the same command, field by field."""
import io
import json
import os
import re
import tarfile

from test_checkpoint import Store

import pytest


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def counts(text):
    """The numbers of a summary line, in order."""
    return [int(n) for n in re.findall(r"\d+", text)]


def make_tree(ws):
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    (ws / "d").mkdir(mode=0o750)
    os.chmod(ws / "d", 0o750)
    (ws / "d" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(ws / "d" / "run.sh", 0o755)
    os.symlink("a.txt", ws / "link")
    # a name that is not UTF-8: null, its bytes in hex beside it
    with open(os.path.join(os.fsencode(ws), b"n\xfe"), "wb") as f:
        f.write(b"\xff")


def test_create_and_import_json_match_their_text(store, tmp_path):
    ws = tmp_path / "ws"
    make_tree(ws)
    text = store("create", "--workspace", str(ws), "--session", "t", check=True)
    (ws / "a.txt").write_text("two\n")
    js = store("create", "--workspace", str(ws), "--session", "j", "--json", check=True)
    obj = json.loads(js.stdout)
    keys = ["files", "files_read", "files_unchanged", "dirs", "symlinks", "skipped", "bytes",
            "chunks_new", "bytes_new"]
    assert list(obj) == ["id"] + keys
    assert re.fullmatch(r"[0-9a-f]{64}", obj["id"])
    # the id is the session's latest, as the text form's line is
    assert store("latest", "--session", "j", check=True).stdout.decode() == obj["id"] + "\n"
    assert counts(js.stderr.decode()) == [obj[k] for k in keys]
    assert (obj["files"], obj["dirs"], obj["symlinks"], obj["bytes"]) == (3, 1, 1, 15)
    assert re.fullmatch(rb"[0-9a-f]{64}\n", text.stdout)

    tar = tmp_path / "t.tar"
    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in (("x/f", b"abc"), ("g", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    p = store("import", str(tar), "--session", "i", "--json", check=True)
    obj = json.loads(p.stdout)
    keys = ["files", "dirs", "implied_dirs", "symlinks", "bytes", "chunks_new", "bytes_new"]
    assert list(obj) == ["id"] + keys
    assert counts(p.stderr.decode()) == [obj[k] for k in keys]
    assert (obj["files"], obj["dirs"], obj["implied_dirs"], obj["bytes"]) == (2, 1, 1, 3)
    assert store("latest", "--session", "i", check=True).stdout.decode() == obj["id"] + "\n"


def test_ls_json_matches_ls(store, tmp_path):
    ws = tmp_path / "ws"
    make_tree(ws)
    cid = json.loads(store("create", "--workspace", str(ws), "--json", check=True).stdout)["id"]
    rows = json.loads(store("ls", cid[:8], "--json", check=True).stdout)
    lines = store("ls", cid, check=True).stdout.split(b"\n")[:-1]
    assert len(rows) == len(lines) == 5
    for row, line in zip(rows, lines):
        kind, mode, size, rest = line.split(None, 3)
        assert row["type"] == {b"d": "dir", b"f": "file", b"l": "symlink"}[kind]
        if row["type"] == "symlink":
            assert "mode" not in row and "size" not in row and mode == b"-"
            name, target = rest.split(b" -> ")
            assert row["target"] == target.decode()
        else:
            assert row["mode"] == mode.decode()
            name = rest
        assert ("size" in row) == (row["type"] == "file")
        if "size" in row:
            assert row["size"] == int(size)
        if row["path"] is None:
            assert bytes.fromhex(row["path_hex"]) == b"n\xfe" and name == b"n\xfe"
        else:
            assert row["path"].encode() == name
    assert [r["path"] for r in rows] == ["a.txt", "d", "d/run.sh", "link", None]
    assert [r.get("mode") for r in rows] == ["0644", "0750", "0755", None, "0644"]


def test_diff_json_matches_names_only(store, tmp_path):
    ws = tmp_path / "ws"
    make_tree(ws)
    a = json.loads(store("create", "--workspace", str(ws), "--json", check=True).stdout)["id"]
    (ws / "a.txt").write_text("changed\n")
    (ws / "link").unlink()
    os.symlink("d", ws / "link")
    os.unlink(os.path.join(os.fsencode(ws), b"n\xfe"))
    (ws / "new").write_text("")
    os.chmod(ws / "d" / "run.sh", 0o700)
    b = json.loads(store("create", "--workspace", str(ws), "--json", check=True).stdout)["id"]
    rows = json.loads(store("diff", a, b, "--json", check=True).stdout)
    text = store("diff", a, b, "--names-only", check=True).stdout
    assert text == (b"M a.txt\nM d/run.sh\nM link\nA new\nD n\xfe\n")
    assert [(r["change"], r["path"]) for r in rows] == [
        ("M", "a.txt"), ("M", "d/run.sh"), ("M", "link"), ("A", "new"), ("D", None)]
    assert rows[4]["path_hex"] == "6efe"
    assert rows[0]["before"] == {"type": "file", "path": "a.txt", "mode": "0644", "size": 4}
    assert rows[0]["after"] == {"type": "file", "path": "a.txt", "mode": "0644", "size": 8}
    assert (rows[1]["before"]["mode"], rows[1]["after"]["mode"]) == ("0755", "0700")
    assert (rows[2]["before"]["target"], rows[2]["after"]["target"]) == ("a.txt", "d")
    assert rows[3]["before"] is None and rows[3]["after"]["size"] == 0
    assert rows[4]["after"] is None and rows[4]["before"]["path_hex"] == "6efe"
    assert store("diff", a, a, "--json", check=True).stdout == b"[]\n"
    p = store("diff", a, b, "--json", "--names-only")
    assert (p.returncode, p.stderr) == (
        125, b"airlock: --json lists the changed paths alone: --names-only goes without it\n")


def test_latest_adopt_and_gc_json(store, tmp_path):
    ws = tmp_path / "ws"
    make_tree(ws)
    cid = json.loads(store("create", "--workspace", str(ws), "--session", "s",
                           "--json", check=True).stdout)["id"]
    assert json.loads(store("latest", "--session", "s", "--json", check=True).stdout) == {
        "id": cid, "session": "s"}
    assert json.loads(store("adopt", cid[:6], "--session", "fork", "--json",
                            check=True).stdout) == {"id": cid, "session": "fork"}
    assert store("latest", "--session", "fork", check=True).stdout.decode() == cid + "\n"
    (ws / "a.txt").write_text("second\n")
    store("create", "--workspace", str(ws), "--session", "s", check=True)
    keys = ["dry_run", "checkpoints_deleted", "checkpoints_kept", "manifests_deleted",
            "packs_deleted", "packs_orphan_deleted", "packs_kept", "packs_partly_used",
            "packs_rewritten", "temp_deleted", "bytes_freed"]
    # a dry run changes nothing: its text and JSON describe the same store
    text = store("gc", "--keep-last", "1", "--dry-run", check=True).stdout.decode()
    dry = json.loads(store("gc", "--keep-last", "1", "--dry-run", "--json", check=True).stdout)
    assert list(dry) == keys and dry["dry_run"] is True
    assert text.startswith("gc (dry run, nothing deleted): ")
    assert counts(text) == [dry[k] for k in keys[1:]]
    # session s keeps its newer checkpoint, fork the adopted one
    assert (dry["checkpoints_deleted"], dry["checkpoints_kept"]) == (1, 2)
    real = json.loads(store("gc", "--keep-last", "1", "--json", check=True).stdout)
    assert list(real) == keys and real["dry_run"] is False
    assert [real[k] for k in keys[1:4]] == [dry[k] for k in keys[1:4]]
    text = store("gc", "--keep-last", "1", check=True).stdout.decode()
    assert text.startswith("gc: 0 checkpoints deleted, 2 kept; 0 manifests deleted;"), text


def test_json_elsewhere_is_refused(store, tmp_path):
    ws = tmp_path / "ws"
    make_tree(ws)
    cid = json.loads(store("create", "--workspace", str(ws), "--json", check=True).stdout)["id"]
    for args in (["restore", cid, "--to", str(tmp_path / "r")],
                 ["export", cid, "-o", str(tmp_path / "x.tar")]):
        p = store(*args, "--json")
        assert (p.returncode, p.stderr.decode()) == (
            125, "airlock: --json is an option of `checkpoint create`, `import`, `ls`, "
                 "`diff`, `latest`, `log`, `adopt` and `gc` only\n"), args
    assert not (tmp_path / "r").exists() and not (tmp_path / "x.tar").exists()
