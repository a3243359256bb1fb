#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The checkpoint benchmark's tree: generate, change, revert, list.

  tree.py gen DIR                     make the tree (DIR must not exist); writes DIR/.bench-stamp last
  tree.py stamp                       print what a complete tree's stamp holds
  tree.py change DIR SEED N JOURNAL   append one line to N files (chosen by SEED); JOURNAL records how to undo it
  tree.py revert DIR JOURNAL          undo change (truncate to the old size, put back the old mtime)
  tree.py listing DIR RES             sorted listing with every file's SHA-256; RES is "s" or "ns" (mtime resolution)
  tree.py compare A B RES             compare two listings (made with ns), mtimes to RES; exit 1 when they differ

Everything is deterministic: the same GENERATOR version and parameters (in
the stamp; bump GENERATOR when gen() changes what it makes) give the same tree, byte for byte, with the
same modes and mtimes. Only the standard library is used; random.Random
with a fixed seed is stable across Python 3 versions for random(),
getrandbits() and choices() with no weights.
"""
import hashlib
import os
import random
import sys

GENERATOR = 1
SEED = 20261130
N_SMALL = 49_300      # 1-20 KiB text, skewed to the small end
N_MEDIUM = 700        # 100 KiB - 5 MiB text, skewed to the small end
N_BINARY = 4          # 50-100 MiB of random bytes
N_EMPTY = 200
N_SYMLINK = 100
N_DIRS = 2_400        # leaf directories, 3-6 levels deep
STAMP = ".bench-stamp"
EPOCH = 1_700_000_000  # mtimes: EPOCH + up to ~1 year, whole seconds


def stamp_text():
    return (f"airlock checkpoint bench tree\ngenerator {GENERATOR}\nseed {SEED}\n"
            f"small {N_SMALL} medium {N_MEDIUM} binary {N_BINARY} empty {N_EMPTY} "
            f"symlink {N_SYMLINK} dirs {N_DIRS}\n")


def word_list(rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    kw = ["if", "else", "for", "while", "return", "static", "const", "struct", "int", "char",
          "size_t", "void", "unsigned", "uint64_t", "bool", "true", "false", "NULL", "err",
          "buf", "len", "ctx", "fd", "rc", "ret", "out", "data", "path", "name", "node"]
    words = set(kw)
    while len(words) < 3000:
        n = 2 + int(rng.random() ** 2 * 10)
        words.add("".join(rng.choice(letters) for _ in range(n)))
    return sorted(words)


def line_pool(rng, words, n=65536):
    """Code-like lines: C-ish statements, comments, blank lines, indented."""
    pool = []
    for _ in range(n):
        ind = "\t" * int(rng.random() ** 1.5 * 4)
        k = rng.random()
        w = lambda: rng.choice(words)  # noqa: E731
        if k < 0.08:
            s = ""
        elif k < 0.25:
            s = "/* " + " ".join(w() for _ in range(3 + int(rng.random() * 10))) + " */"
        elif k < 0.40:
            s = f"if ({w()}_{w()}({w()}, {int(rng.random() * 1000)}) < 0)"
        elif k < 0.55:
            s = f"{w()}->{w()} = {w()}_{w()}({w()}, {w()});"
        elif k < 0.65:
            s = f"return {w()}_{w()}({w()});"
        elif k < 0.75:
            s = f"static {rng.choice(['int', 'size_t', 'bool', 'const char *'])} {w()}_{w()}(struct {w()} *{w()})"
        elif k < 0.85:
            s = "}" if rng.random() < 0.5 else "{"
        else:
            s = f"{w()} += {int(rng.random() * 65536)}; // {w()} {w()}"
        pool.append(ind + s + "\n")
    return pool


def text_bytes(rng, pool, size):
    # lines average ~35 bytes; a few extra, then cut to the exact size
    k = size // 30 + 4
    out = "".join(rng.choices(pool, k=k)).encode()
    while len(out) < size:
        out += "".join(rng.choices(pool, k=k)).encode()
    return out[:size]


def gen(top):
    rng = random.Random(SEED)
    words = word_list(rng)
    pool = line_pool(rng, words)
    os.makedirs(top)
    tops = ["src", "lib", "tests", "docs", "tools", "vendor", "include", "examples"]
    dirs = set()
    while len(dirs) < N_DIRS:
        depth = 3 + int(rng.random() * 4)  # 3..6 levels
        comps = [rng.choice(tops)] + [rng.choice(words) for _ in range(depth - 1)]
        dirs.add("/".join(comps))
    dirs = sorted(dirs)
    alldirs = set()
    for d in dirs:
        parts = d.split("/")
        for i in range(1, len(parts) + 1):
            alldirs.add("/".join(parts[:i]))
    alldirs = sorted(alldirs)
    for d in alldirs:
        os.makedirs(os.path.join(top, d), exist_ok=True)
    exts = [".c", ".c", ".c", ".h", ".h", ".py", ".md", ".txt", ".js", ".go", ".rs", ".json"]
    used = set()
    made = []

    def newpath(ext):
        while True:
            d = rng.choice(dirs) if rng.random() < 0.85 else rng.choice(alldirs)
            p = f"{d}/{rng.choice(words)}_{rng.choice(words)}{ext}"
            if p not in used and p not in alldirs:
                used.add(p)
                return p

    total = 0
    for i in range(N_SMALL + N_MEDIUM + N_BINARY + N_EMPTY):
        if i < N_SMALL:
            size = int(1024 * 20 ** (rng.random() ** 1.7))
            p = newpath(rng.choice(exts))
            data = text_bytes(rng, pool, size)
        elif i < N_SMALL + N_MEDIUM:
            size = int(100 * 1024 * 51.2 ** (rng.random() ** 2.2))
            p = newpath(rng.choice([".c", ".txt", ".json", ".sql", ".csv"]))
            data = text_bytes(rng, pool, size)
        elif i < N_SMALL + N_MEDIUM + N_BINARY:
            size = int((50 + rng.random() * 50) * 1024 * 1024)
            p = newpath(rng.choice([".bin", ".so", ".a", ".pack"]))
            data = rng.getrandbits(size * 8).to_bytes(size, "little")
        else:
            p = newpath(rng.choice(exts))
            data = b""
        full = os.path.join(top, p)
        with open(full, "wb") as f:
            f.write(data)
        mode = 0o755 if rng.random() < 0.03 else 0o644
        os.chmod(full, mode)
        total += len(data)
        made.append(p)
    for i in range(N_SYMLINK):
        p = newpath("")
        target = os.path.relpath(rng.choice(made), os.path.dirname(p))
        os.symlink(target, os.path.join(top, p))
    # mtimes last, files before directories, deepest directories first
    for p in made:
        t = (EPOCH + int(rng.random() * 3e7)) * 10**9
        os.utime(os.path.join(top, p), ns=(t, t))
    for d in sorted(alldirs, key=lambda d: -d.count("/")):
        t = (EPOCH + int(rng.random() * 3e7)) * 10**9
        os.utime(os.path.join(top, d), ns=(t, t))
    with open(os.path.join(top, STAMP), "w") as f:
        f.write(stamp_text())
    print(f"{len(made)} files, {N_SYMLINK} symlinks, {len(alldirs)} directories, {total} bytes",
          file=sys.stderr)


def regular_files(top):
    out = []
    for dp, dn, fn in os.walk(top):
        dn.sort()
        for n in fn:
            p = os.path.join(dp, n)
            if n != STAMP and not os.path.islink(p):
                out.append(os.path.relpath(p, top))
    out.sort()
    return out


def change(top, seed, n, journal):
    files = regular_files(top)
    rng = random.Random(f"change-{seed}")
    pick = rng.sample(files, n)
    # the journal first (fsynced), so that an interrupted change can be undone
    with open(journal, "a") as j:
        for p in pick:
            st = os.stat(os.path.join(top, p))
            j.write(f"{st.st_size} {st.st_atime_ns} {st.st_mtime_ns} {p}\n")
        j.flush()
        os.fsync(j.fileno())
    for i, p in enumerate(pick):
        with open(os.path.join(top, p), "ab") as f:
            f.write(f"/* bench change {seed} {i}: appended line */\n".encode())
    print(f"changed {len(pick)} files", file=sys.stderr)


def revert(top, journal):
    if not os.path.exists(journal):
        return
    with open(journal) as j:
        lines = j.read().splitlines()
    # newest first: a file changed twice gets its oldest state back last
    for line in reversed(lines):
        size, at, mt, p = line.split(" ", 3)
        full = os.path.join(top, p)
        os.truncate(full, int(size))
        os.utime(full, ns=(int(at), int(mt)), follow_symlinks=False)
    os.unlink(journal)


def listing(top, res):
    div = 10**9 if res == "s" else 1
    lines = []
    for dp, dn, fn in os.walk(top):
        for n in dn + fn:
            full = os.path.join(dp, n)
            rel = os.path.relpath(full, top)
            if rel == STAMP:
                continue
            st = os.lstat(full)
            mode = oct(st.st_mode & 0o7777)
            mt = st.st_mtime_ns // div
            if os.path.islink(full):
                lines.append(f"l {rel} -> {os.readlink(full)}")
            elif os.path.isdir(full):
                lines.append(f"d {rel} {mode} {mt}")
            else:
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    while True:
                        b = f.read(1 << 20)
                        if not b:
                            break
                        h.update(b)
                lines.append(f"f {rel} {mode} {st.st_size} {mt} {h.hexdigest()}")
    lines.sort()
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)


def compare(a, b, res):
    def load(path):
        out = []
        for line in open(path).read().splitlines():
            f = line.split(" ")
            if res == "s" and f[0] == "d":
                f[3] = str(int(f[3]) // 10**9)
            elif res == "s" and f[0] == "f":
                f[4] = str(int(f[4]) // 10**9)
            out.append(" ".join(f))
        return out
    la, lb = load(a), load(b)
    if la == lb:
        return 0
    sa, sb = set(la), set(lb)
    only_a, only_b = sorted(sa - sb), sorted(sb - sa)
    print(f"listings differ: {len(only_a)} lines only in {a}, {len(only_b)} only in {b}", file=sys.stderr)
    for x in only_a[:5]:
        print(f"  - {x}", file=sys.stderr)
    for x in only_b[:5]:
        print(f"  + {x}", file=sys.stderr)
    return 1


def main():
    a = sys.argv[1:]
    if a[:1] == ["gen"] and len(a) == 2:
        gen(a[1])
    elif a[:1] == ["stamp"] and len(a) == 1:
        sys.stdout.write(stamp_text())
    elif a[:1] == ["change"] and len(a) == 5:
        change(a[1], a[2], int(a[3]), a[4])
    elif a[:1] == ["revert"] and len(a) == 3:
        revert(a[1], a[2])
    elif a[:1] == ["listing"] and len(a) == 3 and a[2] in ("s", "ns"):
        listing(a[1], a[2])
    elif a[:1] == ["compare"] and len(a) == 4 and a[3] in ("s", "ns"):
        sys.exit(compare(a[1], a[2], a[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
