# SPDX-License-Identifier: Apache-2.0
"""`make install`, as a user runs it: the programs, the manual pages and the
bash and zsh completion in place under DESTDIR and PREFIX; the pages render
without a warning and the pages and the completion know every option that
--help shows (both are written from the same tables at build time)."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import REPO

# Commands without a page of their own: airlock(1) has them.
NO_PAGE = {"doctor", "version", "help"}


def build_dir(airlock_bin):
    build = pathlib.Path(airlock_bin).resolve().parents[2]
    if not (build / "meson-private").is_dir():
        pytest.skip(f"{airlock_bin} is not in a meson build tree: no `make install` to try")
    return build


def make_install(build, dest, prefix):
    p = subprocess.run(["make", "-C", str(REPO), "install", f"BUILD={build}",
                        f"DESTDIR={dest}", f"PREFIX={prefix}"],
                       capture_output=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])


def configured_prefix(build):
    p = subprocess.run(["meson", "introspect", "--buildoptions", str(build)],
                       capture_output=True, timeout=60, check=True)
    return next(o["value"] for o in json.loads(p.stdout) if o["name"] == "prefix")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    from conftest import airlock_path
    build = build_dir(airlock_path())
    # make install sets the build directory's prefix: given back after.
    prefix = configured_prefix(build)
    dest = tmp_path_factory.mktemp("install") / "dest"
    try:
        make_install(build, dest, "/usr")
        # Others may run what is installed there (a non-root user too).
        os.chmod(dest.parent, 0o755)
        yield dest / "usr"
    finally:
        subprocess.run(["meson", "configure", str(build), f"-Dprefix={prefix}"],
                       capture_output=True, timeout=60, check=True)


def version(airlock_bin):
    return subprocess.run([airlock_bin, "version"], capture_output=True, timeout=30,
                          check=True).stdout


def help_of(airlock, *cmd):
    p = airlock(*cmd, "--help", check=True)
    return p.stdout.decode()


def commands(airlock):
    return re.findall(r"^  ([a-z]+)", help_of(airlock), re.M)


def table_options(help_text):
    """The options an option table of --help lists ("  --name ...")."""
    return re.findall(r"^  (?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)", help_text, re.M)


def pages(airlock):
    return {"airlock": []} | {c: [c] for c in commands(airlock) if c not in NO_PAGE}


def described(installed):
    """Every command's option tables, as the programs give them to the
    manual and the completion."""
    out = {}
    progs = [installed / "bin" / "airlock"] + sorted((installed / "libexec" / "airlock").iterdir())
    for prog in progs:
        p = subprocess.run([str(prog), "__doc"], capture_output=True, timeout=30, check=True)
        for c in json.loads(p.stdout)["commands"]:
            out[c["name"]] = [o["name"] for o in c["options"]]
    return out


def test_every_file_in_place(airlock, installed):
    pages_ = {f"share/man/man1/{'airlock-' + c if c != 'airlock' else 'airlock'}.1"
              for c in pages(airlock)}
    want = {"bin/airlock", "libexec/airlock/airlock-gateway",
            "libexec/airlock/airlock-checkpoint", "libexec/airlock/airlock-control",
            "share/bash-completion/completions/airlock", "share/zsh/site-functions/_airlock"}
    have = {str(p.relative_to(installed)) for p in installed.rglob("*") if p.is_file()}
    assert have == want | pages_
    for p in want:
        mode = (installed / p).stat().st_mode & 0o777
        assert mode == (0o755 if "bin/" in p or "libexec/" in p else 0o644), (p, oct(mode))


def test_installed_airlock_runs_its_installed_helpers(airlock, installed):
    want = version(airlock.bin)
    assert re.fullmatch(rb"airlock [0-9][^\n]*\n", want), want
    airlock.bin = str(installed / "bin" / "airlock")
    assert airlock("version", check=True).stdout == want
    # Only the installed helpers are there to find: none beside it.
    assert sorted(os.listdir(installed / "bin")) == ["airlock"]
    for cmd, text in ((["gateway"], b"--listen"), (["checkpoint"], b"checkpoint create"),
                      (["session"], b"airlock session")):
        p = airlock(*cmd, "--help")
        assert p.returncode == 0 and text in p.stdout, p


def test_a_changed_prefix_takes_effect(airlock, installed, tmp_path):
    """The build directory was configured for /usr by the fixture: another
    PREFIX on the same build directory installs there."""
    build = build_dir(airlock.bin)
    assert configured_prefix(build) == "/usr"
    make_install(build, tmp_path / "d", "/opt/airlock")
    assert configured_prefix(build) == "/opt/airlock"
    os.chmod(tmp_path, 0o755)
    root = tmp_path / "d" / "opt" / "airlock"
    assert (root / "share/man/man1/airlock.1").is_file()
    want = version(airlock.bin)
    airlock.bin = str(root / "bin" / "airlock")
    assert airlock("version", check=True).stdout == want
    p = airlock("gateway", "--help")
    assert p.returncode == 0 and b"--listen" in p.stdout, p


# ---------------------------------------------------------------------------
# The manual

def render(page, width=250):
    """The page as text (no bold, no underline), and groff's warnings."""
    p = subprocess.run(["groff", "-man", "-Tutf8", "-P-cbou", f"-rLL={width}n", "-ww",
                        str(page)], capture_output=True, timeout=30)
    assert p.returncode == 0, p
    return p.stdout.decode(), p.stderr.decode()


@pytest.mark.skipif(not shutil.which("groff"), reason="groff is not installed (groff-base)")
def test_man_pages_render_and_list_every_option(airlock, installed):
    docs = described(installed)
    for name, cmd in pages(airlock).items():
        page = installed / "share/man/man1" / (f"airlock-{name}.1" if cmd else "airlock.1")
        text, warnings = render(page)
        assert warnings == "", (page, warnings)
        assert text.startswith(f"{page.stem.upper()}(1)"), text[:200]
        if not cmd:
            # airlock(1): every command, and where its page is.
            for c in commands(airlock):
                assert re.search(rf"^ +{c}\b", text, re.M), c
                if c not in NO_PAGE:
                    assert f"airlock-{c}(1)" in text, c
            continue
        opts = table_options(help_of(airlock, *cmd))
        assert opts and sorted(opts) == sorted(docs[name]), (name, opts, docs[name])
        for o in opts:
            # In OPTIONS, at the start of a line, with a plain '-'.
            assert re.search(rf"^ +(-[a-zA-Z], )?--{o}( |$)", text, re.M), (name, o)
    # man itself, as a user reads one: its own warnings too.
    if shutil.which("man"):
        p = subprocess.run(["man", "--warnings", "-l", str(installed /
                                                         "share/man/man1/airlock-sandbox.1")],
                           capture_output=True, timeout=30, env={"MANPAGER": "cat",
                                                                 "MANWIDTH": "100",
                                                                 "PATH": os.environ["PATH"]})
        assert p.returncode == 0 and p.stderr == b"", p.stderr
        assert b"--network MODE" in p.stdout


@pytest.mark.skipif(not shutil.which("groff"), reason="groff is not installed (groff-base)")
def test_troff_escaping(tmp_path):
    """Help text that troff would take for requests, escapes or hyphens
    renders as written."""
    nasty = [".TH leading dot", "'leading quote", "back\\slash \\fBnot bold",
             "--double-dash and -x", "\\- and \\e", "non-ASCII: ü → ok"]
    opts_text = "  --odd                " + nasty[0] + "\n"
    dump = {"version": "9", "top": [{"name": "odd", "synopsis": "--odd [\\x]",
                                     "summary": ".summary with a dot"}],
            "commands": [
                {"name": "airlock", "help": "usage: airlock\n", "options_text": "",
                 "options": []},
                {"name": "odd", "help": "\n".join(nasty) + "\noptions:\n" + opts_text,
                 "options_text": opts_text,
                 "options": [{"name": "odd", "arg": "A\\B", "help": "\n".join(nasty)}]}]}
    src = tmp_path / "dump.json"
    src.write_text(json.dumps(dump))
    outs = [tmp_path / n for n in ("airlock.1", "airlock-odd.1", "airlock", "_airlock")]
    subprocess.run(["python3", str(REPO / "scripts" / "gendoc.py"), "--out", *map(str, outs),
                    "--from", str(src)], check=True, timeout=30)
    text, warnings = render(tmp_path / "airlock-odd.1")
    assert warnings == ""
    # In the description each line as it was; in OPTIONS filled into one.
    for line in nasty:
        assert re.search(rf"^ +{re.escape(line)}$", text, re.M), (line, text)
    assert " ".join(nasty) in " ".join(text.split())
    assert "--odd A\\B" in text
    assert "airlock-odd - .summary with a dot" in text
    # A page for each command described, no more: a missing one fails.
    p = subprocess.run(["python3", str(REPO / "scripts" / "gendoc.py"), "--out",
                        *map(str, outs[:1] + outs[2:]), "--from", str(src)],
                       capture_output=True, timeout=30)
    assert (p.returncode, p.stderr.decode()) == (
        1, "gendoc.py: the outputs in src/cli/doc/meson.build do not match the commands: "
           "add airlock-odd.1\n")


# ---------------------------------------------------------------------------
# bash

def bash_complete(installed, *words, env=None):
    """What the installed completion offers for the words (the last: the
    one being completed), in a bash without any startup file."""
    script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
              'COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; _airlock; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    e = (env or {}) | {"PATH": f"{installed / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"}
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", script, "bash",
                        str(installed / "share/bash-completion/completions/airlock"), *words],
                       capture_output=True, timeout=30, env=e)
    assert p.returncode == 0 and p.stderr == b"", p
    return [w for w in p.stdout.decode().split("\n") if w]


def test_bash_completion(airlock, installed, tmp_path):
    assert bash_complete(installed, "airlock", "") == commands(airlock)
    assert bash_complete(installed, "airlock", "sandbox", "") == [
        "run", "create", "exec", "logs", "list", "inspect", "destroy", "audit", "policy", "budget",
        "gc"]
    assert bash_complete(installed, "airlock", "checkpoint", "l") == ["ls", "latest", "log"]
    assert bash_complete(installed, "airlock", "session", "") == ["list", "show", "rm", "gc"]
    assert bash_complete(installed, "airlock", "sandbox", "run", "--net") == ["--network="]
    nets = ["none", "restricted", "open", "learn"]
    assert bash_complete(installed, "airlock", "sandbox", "run", "--network", "") == nets
    # "--network=o": bash splits the word at '='
    assert bash_complete(installed, "airlock", "sandbox", "run", "--network", "=", "") == nets
    assert bash_complete(installed, "airlock", "sandbox", "run", "--network", "=", "o") == [
        "open"]
    assert bash_complete(installed, "airlock", "gateway", "--mode", "") == ["restricted", "open"]
    # a value taken, the next word is an option again
    assert bash_complete(installed, "airlock", "sandbox", "run", "--network", "open",
                         "--memo") == ["--memory="]
    (tmp_path / "dir1").mkdir()
    (tmp_path / "file1").write_text("")
    base = str(tmp_path) + "/"
    assert bash_complete(installed, "airlock", "sandbox", "run", "--workspace", base) == [
        base + "dir1"]
    assert bash_complete(installed, "airlock", "sandbox", "run", "--image", "=", base) == [
        base + "dir1"]
    assert bash_complete(installed, "airlock", "sandbox", "run", "--image", "h") == ["host"]
    assert sorted(bash_complete(installed, "airlock", "gateway", "--policy", base)) == [
        base + "dir1", base + "file1"]
    # a value with no words to offer (a size): nothing, not the options
    assert bash_complete(installed, "airlock", "sandbox", "run", "--memory", "") == []
    # after "--": the command's own arguments, not airlock's options
    assert bash_complete(installed, "airlock", "sandbox", "run", "--", "--net") == []


def test_bash_completion_offers_sandbox_ids(airlock, installed):
    env = dict(airlock.env)
    assert bash_complete(installed, "airlock", "sandbox", "exec", "", env=env) == []
    sid = airlock("sandbox", "create", check=True).stdout.decode().strip()
    try:
        for sub in ("exec", "logs", "inspect", "destroy", "audit", "policy", "budget"):
            assert bash_complete(installed, "airlock", "sandbox", sub, "", env=env) == [sid], sub
        assert bash_complete(installed, "airlock", "sandbox", "exec", "--cwd", "/", sid[:4],
                             env=env) == [sid]
        # policy ID FILE: the file next
        assert bash_complete(installed, "airlock", "sandbox", "policy", sid, "/et",
                             env=env) == ["/etc"]
        # Not root: no ids, and not an error on the terminal (airlock and
        # the script where that user may run them).
        d = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp"))
        try:
            os.chmod(d, 0o755)
            shutil.copy2(installed / "bin/airlock", d / "airlock")
            shutil.copy2(installed / "share/bash-completion/completions/airlock", d / "compl")
            p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                "bash", "--norc", "-c",
                                'source "$1"; COMP_WORDS=(airlock sandbox exec ""); '
                                'COMP_CWORD=3; _airlock; echo "n=${#COMPREPLY[@]}"', "bash",
                                str(d / "compl")],
                               capture_output=True, timeout=30,
                               env=env | {"PATH": f"{d}:/usr/bin:/bin"})
            assert (p.returncode, p.stdout, p.stderr) == (0, b"n=0\n", b""), p
            # as airlock says it, for that user
            p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                str(d / "airlock"), "sandbox", "list", "--json"],
                               capture_output=True, timeout=30, env=env)
            assert p.returncode == 125 and b"Permission denied" in p.stderr, p
        finally:
            shutil.rmtree(d)
    finally:
        airlock("sandbox", "destroy", sid, check=True)


def test_completion_values_are_what_the_parsers_take(airlock, installed):
    """The words offered for --network and --mode are the ones their
    parsers name."""
    p = airlock("sandbox", "run", "--network=x", "--", "true")
    words = re.fullmatch(r"airlock: --network wants (.*), not 'x'\n", p.stderr.decode())
    assert words, p.stderr
    assert re.split(r", | or ", words.group(1)) == bash_complete(
        installed, "airlock", "sandbox", "run", "--network", "")
    p = airlock("gateway", "--listen=127.0.0.1:1", "--mode=x")
    words = re.fullmatch(r"airlock: --mode wants (.*), not 'x'\n", p.stderr.decode())
    assert words, p.stderr
    assert re.split(r", | or ", words.group(1)) == bash_complete(
        installed, "airlock", "gateway", "--mode", "")


def test_completion_knows_every_option(airlock, installed):
    """bash and zsh: every option of every table (--help's, and as the
    programs describe them)."""
    docs = described(installed)
    zsh_text = (installed / "share/zsh/site-functions/_airlock").read_text()
    for name, cmd in pages(airlock).items():
        if not cmd:
            continue
        opts = set(table_options(help_of(airlock, *cmd))) | set(docs[name])
        sub = {"sandbox": ["run"], "checkpoint": ["create"], "session": ["list"],
               "vault": ["list"]}.get(name, [])
        offered = bash_complete(installed, "airlock", name, *sub, "--")
        assert {o.rstrip("=")[2:] for o in offered} >= opts, (name, opts, offered)
        block = re.search(rf"^_airlock_{name}\(\) {{\n(.*?)^}}", zsh_text, re.M | re.S)
        assert block, name
        for o in opts:
            assert re.search(rf"'\*--{o}[=\[]", block.group(1)), (name, o)


# ---------------------------------------------------------------------------
# zsh

# Runs an interactive zsh in a pseudo-terminal (zsh's zpty), types LINE and
# a TAB, and prints each match completion adds; compadd is wrapped to say
# them, and the shell exits after the one completion.
ZSH_CAPTURE = r"""
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PROMPT= RPROMPT= PS2=; fpath=(${(q)1} \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'bindkey "^I" complete-word'
zpty -w z 'null-line() { echo -E - $'"'"'\0'"'"' }; compprefuncs=(null-line); comppostfuncs=(null-line exit)'
zpty -w z 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi; local -a __hits; builtin compadd -A __hits "$@"; local h; for h in $__hits; do print -r -- "M""ATCH:$h"; done; builtin compadd "$@"; }'
zpty -w z "$2"$'\t'
local line
integer nul=0
while zpty -r z line; do
  [[ $line == *MATCH:* ]] && print -r -- ${${line#*MATCH:}%%$'\r'*}
  if [[ $line == *$'\0'* ]] && (( nul++ )); then exit 0; fi
done
exit 4
"""


def zsh_complete(installed, tmp_path, line, env=None):
    script = tmp_path / "capture.zsh"
    script.write_text(ZSH_CAPTURE)
    e = (env or {}) | {"PATH": f"{installed / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
                       "HOME": str(tmp_path), "TERM": "dumb"}
    p = subprocess.run(["zsh", "-f", str(script), str(installed / "share/zsh/site-functions"),
                        line], capture_output=True, timeout=30, env=e)
    assert p.returncode == 0, p
    out = []
    for w in p.stdout.decode().split("\n"):
        if w and w not in out:
            out.append(w)
    return out


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_completion(airlock, installed, tmp_path):
    path = installed / "share/zsh/site-functions/_airlock"
    p = subprocess.run(["zsh", "-n", str(path)], capture_output=True, timeout=30)
    assert (p.returncode, p.stderr) == (0, b""), p
    assert zsh_complete(installed, tmp_path, "airlock ") == commands(airlock)
    assert zsh_complete(installed, tmp_path, "airlock sandbox ") == [
        "run", "create", "exec", "logs", "list", "inspect", "destroy", "audit", "policy", "budget",
        "gc"]
    assert zsh_complete(installed, tmp_path, "airlock sandbox run --net") == ["--network"]
    nets = ["none", "restricted", "open", "learn"]
    assert zsh_complete(installed, tmp_path, "airlock sandbox run --network ") == nets
    assert zsh_complete(installed, tmp_path, "airlock sandbox run --network=o") == ["open"]
    assert zsh_complete(installed, tmp_path, "airlock gateway --mode ") == ["restricted", "open"]
    (tmp_path / "dir1").mkdir()
    assert zsh_complete(installed, tmp_path, f"airlock sandbox run --image {tmp_path}/d") == [
        "dir1"]
    assert zsh_complete(installed, tmp_path, "airlock sandbox run --image h") == ["host"]
    sid = airlock("sandbox", "create", check=True).stdout.decode().strip()
    try:
        assert zsh_complete(installed, tmp_path, "airlock sandbox exec ",
                            env=dict(airlock.env)) == [sid]
    finally:
        airlock("sandbox", "destroy", sid, check=True)
