# SPDX-License-Identifier: Apache-2.0
"""Every example of the README and the walkthroughs runs as written.

The convention, in the documents this test reads (DOCS):

* a ```sh block runs as written;
* a ```console block shows commands (after "$ ") and what they printed:
  the commands run too, whatever their exit status, and every line shown
  that starts with "airlock:" must be one airlock really wrote ("..."
  stands for lines left out);
* <!-- not run: REASON --> before a block: an example that cannot run on
  a test machine; it is listed here as skipped, with REASON;
* any other block (```, ```yaml ...) is not a command: a block that
  shows an `airlock` or `make` command there is an error of the document.

Each "## " section runs as one shell script (`set -e`: the first failing
command fails it), its blocks in order, as root, in a fresh directory,
with `airlock` the binary under test (first on PATH) and the test's own
state directory, cgroup parent, uid range and checkpoint store. A section
marked <!-- needs network: URL --> is skipped, saying so, when the host
gets no HTTP answer from URL (any status counts: the server is there);
<!-- needs program: P --> when P is not installed. Nothing is faked: the
commands reach the real mirror and registry.
"""
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import REPO

DOCS = ["README.md", "docs/walkthroughs.md"]

# The lines of runnable blocks the test does not run, each with why. They
# build and test this very tree (`make test` runs this test), install
# packages on the host and take many minutes: they cannot run from inside
# the test suite. Nothing else is left out.
NOT_RUN_LINES = {
    ("README.md", "make demo"): "builds airlock and runs the whole demo (installs packages on "
                                "the host); it cannot run from inside the test suite",
    ("README.md", "make test"): "runs every test, this one included: it cannot run from "
                                "inside the test suite",
}

FENCE = re.compile(r"^```(\S*)\s*$")
COMMENT = re.compile(r"^<!--\s*(not run|needs network|needs program):\s*(.*?)\s*-->\s*$")
COMMANDISH = re.compile(r"^\s*(\$\s*)?(sudo\s+)?(airlock|make)(\s|$)")


class Block:
    def __init__(self, doc, line, lang, text, not_run):
        self.doc, self.line, self.lang, self.text, self.not_run = doc, line, lang, text, not_run


class Section:
    def __init__(self, doc, title):
        self.doc, self.title = doc, title
        self.blocks = []
        self.networks = []  # URLs
        self.programs = []

    @property
    def id(self):
        slug = re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")
        return f"{self.doc}#{slug}"

    def runnable(self):
        return [b for b in self.blocks if b.lang in ("sh", "console") and b.not_run is None]


def parse(doc):
    lines = (REPO / doc).read_text().split("\n")
    sections = [Section(doc, doc)]
    not_run = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            sections.append(Section(doc, line[3:]))
        m = COMMENT.match(line)
        if m:
            kind, arg = m.groups()
            if kind == "not run":
                not_run = arg
            elif kind == "needs network":
                sections[-1].networks.append(arg)
            else:
                sections[-1].programs.append(arg)
        m = FENCE.match(line)
        if m:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            sections[-1].blocks.append(Block(doc, i + 1, m.group(1), lines[i + 1:j], not_run))
            not_run = None
            i = j
        elif line.strip() and not COMMENT.match(line):
            assert not_run is None, f"{doc}:{i + 1}: <!-- not run --> must come right before a block"
        i += 1
    return sections


SECTIONS = [s for d in DOCS for s in parse(d)]


def strip_comment(line):
    return re.sub(r"\s+#.*$", "", line).strip()


def test_every_block_follows_the_convention():
    """A block that shows a command is run or says why not; skipped lines exist."""
    used = set()
    for s in SECTIONS:
        for b in s.blocks:
            where = f"{b.doc}:{b.line}"
            if b.not_run is not None:
                assert b.not_run, f"{where}: <!-- not run: --> needs a reason"
                continue
            if b.lang == "console":
                assert any(l.startswith("$ ") for l in b.text), f"{where}: a console block " \
                                                                 "shows no command"
            elif b.lang == "sh":
                used |= {(b.doc, strip_comment(l)) for l in b.text}
            else:
                bad = [l for l in b.text if COMMANDISH.match(l)]
                assert not bad, f"{where}: a ```{b.lang} block shows commands that are " \
                                f"neither run nor marked <!-- not run: REASON -->: {bad}"
    assert set(NOT_RUN_LINES) <= used, set(NOT_RUN_LINES) - used


def not_run_items():
    items = []
    for s in SECTIONS:
        for b in s.blocks:
            if b.not_run is not None:
                items.append(pytest.param(b.not_run, id=f"{b.doc}:{b.line}"))
    for (doc, line), why in NOT_RUN_LINES.items():
        items.append(pytest.param(f"`{line}`: {why}", id=f"{doc}:{line.replace(' ', '-')}"))
    return items


@pytest.mark.parametrize("reason", not_run_items())
def test_not_run(reason):
    """The examples a test machine cannot run, listed with why."""
    pytest.skip(f"not run: {reason}")


def script(section, outdir):
    """The section's blocks as one shell script; the console blocks' expected
    lines, by the file their command's output goes to."""
    parts = ["set -e -o pipefail"]
    expect = []
    for b in section.runnable():
        parts.append(f"printf '\\n### %s\\n' '{b.doc}:{b.line}' >&2")
        if b.lang == "sh":
            for l in b.text:
                key = (b.doc, strip_comment(l))
                if key in NOT_RUN_LINES:
                    l = f": not run: {key[1]}"
                parts.append(l)
            continue
        for l in b.text:
            if l.startswith("$ "):
                out = os.path.join(outdir, f"{len(expect)}.out")
                expect.append((f"{b.doc}:{b.line}", l[2:], out, []))
                parts.append(f"{{ {l[2:]} ; }} >{out} 2>&1 || true")
            elif l.startswith("airlock:"):
                expect[-1][3].append(l)
    return "\n".join(parts) + "\n", expect


def unreachable(url):
    """Why url gives no HTTP answer, or None when it gives one."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=20):
            return None
    except urllib.error.HTTPError:
        return None  # an answer, if not a happy one: the server is reachable
    except (OSError, ValueError) as e:
        return str(e)


@pytest.mark.parametrize("section", [pytest.param(s, id=s.id) for s in SECTIONS
                                     if s.runnable()])
def test_examples_run_as_written(section, airlock, tmp_path):
    for url in section.networks:
        why = unreachable(url)
        if why:
            pytest.skip(f"{section.id} needs {url}, which answers nothing here: {why}")
    for prog in section.programs:
        if not shutil.which(prog):
            pytest.skip(f"{section.id} needs {prog}, which this host does not have")
    bindir, work, outdir = tmp_path / "bin", tmp_path / "work", tmp_path / "out"
    for d in (bindir, work, outdir, tmp_path / "home"):
        d.mkdir()
    os.symlink(airlock.bin, bindir / "airlock")
    env = dict(airlock.env)
    env.update(PATH=f"{bindir}:{env['PATH']}", HOME=str(tmp_path / "home"), LANG="C.UTF-8",
               AIRLOCK_STORE_DIR=str(tmp_path / "store"),
               AIRLOCK_CHECKPOINT_KEY=str(tmp_path / "checkpoint.key"))
    text, expect = script(section, str(outdir))
    p = subprocess.run(["bash", "-c", text], cwd=work, env=env, capture_output=True,
                       timeout=900)
    if p.returncode != 0:
        # what a failed example left running goes, so that the failure is the example's
        for sb in json.loads(airlock.sandbox("list", "--json").stdout or b"[]"):
            airlock.sandbox("destroy", sb["id"])
    assert p.returncode == 0, (
        f"{section.id} failed (exit {p.returncode}); the last block started is the last "
        f"'###' line:\nstdout: {p.stdout.decode()[-3000:]}\nstderr: {p.stderr.decode()[-3000:]}")
    for where, cmd, out, lines in expect:
        got = open(out).read().split("\n")
        missing = [l for l in lines if l not in got]
        assert not missing, (f"{where}: `{cmd}` did not write what the document shows: "
                             f"{missing}\nit wrote:\n{''.join(l + chr(10) for l in got)[-3000:]}")
