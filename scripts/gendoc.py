#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes airlock's manual pages and its bash and zsh completion from what
the programs say of themselves (`PROGRAM __doc`: each command's --help text
and the option tables it prints), at build time, so that neither can drift
from the programs:

    gendoc.py --out OUTPUT... --from PROGRAM|FILE.json...

OUTPUT: airlock.1, airlock-COMMAND.1 for each command the programs
describe (no more, no fewer: a command added without its page in
src/cli/doc/meson.build fails the build), airlock (bash), _airlock (zsh).
"""
import argparse
import json
import os
import re
import subprocess
import sys

# Values a shell may complete for an option, beyond a DIR or FILE in the
# option's value name: the words its parser accepts (tests/integration/
# test_install.py checks them against the parsers' own messages).
VALUE_WORDS = {
    ("sandbox", "network"): ["none", "restricted", "open", "learn"],
    ("sandbox", "image"): ["host"],
    ("gateway", "mode"): ["restricted", "open"],
}
# Positional arguments that are sandbox ids (the last one: and every one
# after it) or files, by command and subcommand.
POSITIONALS = {
    ("sandbox", "exec"): ["sandbox"],
    ("sandbox", "logs"): ["sandbox"],
    ("sandbox", "inspect"): ["sandbox"],
    ("sandbox", "destroy"): ["sandbox..."],
    ("sandbox", "audit"): ["sandbox"],
    ("sandbox", "policy"): ["sandbox", "file"],
    ("sandbox", "budget"): ["sandbox"],
    ("checkpoint", "import"): ["file"],
}
SUMMARY = "sandboxes for AI coding agents, with an egress gateway"


def fail(msg):
    sys.exit(f"gendoc.py: {msg}")


def load(source):
    if source.endswith(".json"):
        with open(source) as f:
            return json.load(f)
    p = subprocess.run([source, "__doc"], capture_output=True, timeout=60)
    if p.returncode != 0:
        fail(f"{source} __doc exited {p.returncode}: {p.stderr.decode(errors='replace')}")
    return json.loads(p.stdout)


# ---- the model: every command, with its options and subcommands ----

OPT_IN_TEXT = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?:[ =]([A-Z][A-Z0-9_.:|=\[\]-]*))?")


ALTERNATIVES = re.compile(r"[a-z]+( [A-Z]+)?( ?\| ?[a-z]+( [A-Z]+)?)+")


def subcommands(name, synopsis, help_text):
    """The words after `airlock NAME` in its usage lines and its synopsis:
    the first, or each of alternatives such as "list | show ID | rm ID"."""
    subs = []
    usages = [synopsis] + re.findall(rf"airlock {re.escape(name)} ([^\n]*)", help_text)
    for u in usages:
        u = u.strip()
        alts = u.split("|") if ALTERNATIVES.fullmatch(u) else [u]
        for alt in alts:
            w = alt.split()[0] if alt.split() else ""
            if re.fullmatch(r"[a-z][a-z-]*", w) and w not in subs:
                subs.append(w)
    return subs


def description(cmd):
    """The help text without its option tables (the manual lists them on
    their own), nor the "options:" line before them."""
    help_text, opts = cmd["help"], cmd["options_text"]
    if not opts:
        return help_text.strip("\n")
    i = help_text.index(opts)
    before, after = help_text[:i].rstrip("\n"), help_text[i + len(opts):].strip("\n")
    lines = before.split("\n")
    if lines and lines[-1].strip().endswith("options:"):
        lines.pop()
    before = "\n".join(lines).rstrip("\n")
    return before + ("\n\n" + after if after else "")


def model(dumps):
    top, version, cmds = None, None, {}
    for d in dumps:
        version = version or d["version"]
        if "top" in d:
            top = d["top"]
        for c in d["commands"]:
            if c["name"] in cmds:
                fail(f"command {c['name']} described twice")
            cmds[c["name"]] = c
    if top is None or "airlock" not in cmds:
        fail("no description of airlock itself (airlock __doc)")
    by_name = {t["name"]: t for t in top}
    for name, c in cmds.items():
        if name == "airlock":
            continue
        if name not in by_name:
            fail(f"command {name} is not in airlock's command list")
        c["synopsis"], c["summary"] = by_name[name]["synopsis"], by_name[name]["summary"]
        c["subcommands"] = subcommands(name, c["synopsis"], c["help"])
        # Options the usage text names beyond the tables (sandbox budget's).
        known = {o["name"] for o in c["options"]}
        c["extra"] = []
        for m in OPT_IN_TEXT.finditer(description(c)):
            n = m.group(1)[2:]
            if n not in known:
                known.add(n)
                c["extra"].append({"name": n, "arg": m.group(2), "help": None})
    # What they name must be there (a command described elsewhere: not here).
    for (cname, oname) in VALUE_WORDS:
        if cname in cmds and oname not in {o["name"] for o in cmds[cname]["options"]}:
            fail(f"VALUE_WORDS names --{oname} of {cname}, which has no such option")
    for (cname, sub) in POSITIONALS:
        if cname in cmds and sub not in cmds[cname]["subcommands"]:
            fail(f"POSITIONALS names {cname} {sub}, which is no such subcommand")
    return version, top, cmds


# ---- troff ----

def roff_chars(text):
    """Text for troff, as written: backslashes, hyphens and anything not
    ASCII escaped."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\e")
        elif ch == "-":
            out.append("\\-")
        elif ord(ch) > 126 or (ord(ch) < 32 and ch != "\t"):
            out.append("\\[u%04X]" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def roff(line):
    """A line of text: and not a request when it starts with '.' or "'"."""
    s = roff_chars(line)
    return "\\&" + s if s[:1] in (".", "'") else s


def roff_filled(text):
    """Text to fill: its lines, each escaped, without their indentation."""
    return "\n".join(roff(line.strip()) for line in text.split("\n") if line.strip())


def roff_verbatim(text):
    """Text as it is, line by line (no-fill mode keeps leading spaces)."""
    return "\n".join([".nf"] + [roff(line) for line in text.split("\n")] + [".fi"])


def option_tag(o):
    tag = "\\fB\\-\\-" + roff_chars(o["name"]) + "\\fR"
    if o.get("short"):
        tag = "\\fB\\-" + roff_chars(o["short"]) + "\\fR, " + tag
    if o["arg"]:
        tag += " \\fI" + roff_chars(o["arg"]) + "\\fR"
    return tag


def page(title, name_line, synopsis, sections, version):
    # .nh, .ad l: no hyphenation, a ragged right edge (option names and
    # paths stay whole).
    out = [f'.TH {title} 1 "" "airlock {version}" "airlock manual"', ".nh", ".ad l",
           ".SH NAME", name_line, ".SH SYNOPSIS", synopsis]
    for head, body in sections:
        out += [f".SH {head}", body]
    return "\n".join(out) + "\n"


def command_page(c, pages, version):
    name = c["name"]
    opts = []
    for o in c["options"]:
        opts += [".TP", option_tag(o), roff_filled(o["help"])]
    syn = "\\fBairlock " + roff(name) + "\\fR"
    if c["synopsis"]:
        syn += " " + roff(c["synopsis"])
    sections = [("DESCRIPTION", roff_filled(c["summary"]) + "\n.PP\n" +
                 roff_verbatim(description(c)))]
    if opts:
        sections.append(("OPTIONS", "\n".join(opts)))
    sections.append(("SEE ALSO", ",\n".join(f".BR {p} (1)" for p in ["airlock"] + pages
                                            if p != f"airlock-{name}")))
    return page(f"AIRLOCK\\-{roff(name.upper())}",
                f"airlock\\-{roff(name)} \\- {roff(c['summary'])}", syn, sections, version)


def top_page(top, cmds, pages, version):
    items = []
    for t in top:
        items += [".TP", "\\fB" + roff(t["name"]) + "\\fR" +
                  (" " + roff(t["synopsis"]) if t["synopsis"] else ""),
                  roff_filled(t["summary"])]
        if t["name"] in cmds:
            items += [".br", f"See \\fBairlock\\-{roff(t['name'])}\\fR(1)."]
    help_text = cmds["airlock"]["help"]
    env = help_text[help_text.find("\nenvironment:"):].strip("\n") \
        if "\nenvironment:" in help_text else ""
    sections = [("DESCRIPTION", roff_filled(
        "airlock runs commands and AI coding agents in Linux sandboxes whose only "
        "way out is an egress gateway, and keeps checkpoints of their workspaces.")),
        ("COMMANDS", "\n".join(items))]
    if env:
        sections.append(("ENVIRONMENT", roff_verbatim(env)))
    sections.append(("SEE ALSO", ",\n".join(f".BR {p} (1)" for p in pages)))
    return page("AIRLOCK", f"airlock \\- {roff(SUMMARY)}",
                "\\fBairlock\\fR \\fICOMMAND\\fR [\\fIARGS\\fR]", sections, version)


# ---- what an option's value is ----

def value_kind(cname, o):
    """("words", [...], dirs?) or ("files",) or ("dirs",) or None."""
    arg = o["arg"] or ""
    parts = arg.split("|")
    words = list(VALUE_WORDS.get((cname, o["name"]), []))
    dirs = any(p == "DIR" for p in parts)
    files = any(p == "FILE" or p.startswith("FILE.") for p in parts)
    if words:
        return ("words", words, dirs)
    if dirs:
        return ("dirs",)
    if files:
        return ("files",)
    return None


def all_options(c):
    return c["options"] + c["extra"]


# ---- bash ----

def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def bash(top, cmds):
    names = [t["name"] for t in top]
    out = ["# bash completion for airlock: generated by scripts/gendoc.py from the",
           "# programs' option tables (the same as their --help); do not edit.", "",
           "# The sandboxes' ids, from `airlock sandbox list --json` (nothing when it",
           "# cannot list them: not root, no state directory).",
           "_airlock_sandbox_ids()",
           "{",
           "\ttimeout 2 \"$1\" sandbox list --json 2>/dev/null |",
           "\t\tgrep -o '\"id\":\"[0-9a-f]*\"' | cut -d'\"' -f4",
           "}", "",
           "# The options of command $1, with '=' after those that take a value.",
           "_airlock_options()",
           "{",
           "\tcase $1 in"]
    for name, c in cmds.items():
        if name == "airlock":
            continue
        words = " ".join(("-" + o["short"] + " " if o.get("short") else "") + "--" +
                         o["name"] + ("=" if o["arg"] else "") for o in all_options(c))
        out.append(f"\t{name}) echo {sh_quote(words)} ;;")
    out += ["\tesac", "}", "",
            "_airlock_subcommands()", "{", "\tcase $1 in"]
    for name, c in cmds.items():
        if name != "airlock" and c["subcommands"]:
            out.append(f"\t{name}) echo {sh_quote(' '.join(c['subcommands']))} ;;")
    out += ["\tesac", "}", "",
            "# COMPREPLY for the value of option $2 of command $1 (\"--name\"), typed so",
            "# far: $3.",
            "_airlock_value()",
            "{",
            "\tcase $1:$2 in"]
    for name, c in cmds.items():
        if name == "airlock":
            continue
        for o in all_options(c):
            k = value_kind(name, o) if o["arg"] else None
            if not k:
                continue
            key = f"{name}:--{o['name']}"
            if k[0] == "words":
                body = f"mapfile -t COMPREPLY < <(compgen -W {sh_quote(' '.join(k[1]))} -- \"$3\""
                body += "; compgen -d -- \"$3\")" if k[2] else ")"
                if k[2]:
                    body += "; compopt -o filenames 2>/dev/null"
            elif k[0] == "dirs":
                body = "mapfile -t COMPREPLY < <(compgen -d -- \"$3\"); " \
                       "compopt -o filenames 2>/dev/null"
            else:
                body = "mapfile -t COMPREPLY < <(compgen -f -- \"$3\"); " \
                       "compopt -o filenames 2>/dev/null"
            out.append(f"\t{key}) {body} ;;")
    out += ["\t*) COMPREPLY=() ;;", "\tesac", "\treturn 0", "}", "",
            "# What positional argument $3 (from 1) of `airlock $1 $2` is.",
            "_airlock_positional()",
            "{",
            "\tcase $1:$2 in"]
    for (cname, sub), kinds in POSITIONALS.items():
        cases = []
        for i, k in enumerate(kinds, 1):
            last = k.endswith("...")
            cases.append(f"{'*' if last else i}) echo {k.rstrip('.')} ;;")
        out.append(f"\t{cname}:{sub}) case $3 in {' '.join(cases)} esac ;;")
    out += ["\tesac", "}", "",
            "_airlock()",
            "{",
            "\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}",
            "\tlocal cmd='' sub='' opt='' opts='' w i npos=0 dashdash=0",
            "\tCOMPREPLY=()",
            "\t# \"--name=VALUE\": bash splits it at '=' (COMP_WORDBREAKS), or not.",
            "\tif [[ $cur == = && $prev == --* ]]; then",
            "\t\topt=$prev cur=''",
            "\telif [[ $prev == = && ${COMP_WORDS[COMP_CWORD - 2]} == --* ]]; then",
            "\t\topt=${COMP_WORDS[COMP_CWORD - 2]}",
            "\telif [[ $cur == --*=* ]]; then",
            "\t\topt=${cur%%=*} cur=${cur#*=}",
            "\tfi",
            "\t# The command, its subcommand and the positional arguments before cur.",
            "\tfor ((i = 1; i < COMP_CWORD; i++)); do",
            "\t\tw=${COMP_WORDS[i]}",
            "\t\tif ((dashdash)); then",
            "\t\t\t((npos++))",
            "\t\telif [[ $w == -- ]]; then",
            "\t\t\tdashdash=1",
            "\t\telif [[ $w == --* ]]; then",
            "\t\t\t# its value: after '=', or the next word",
            "\t\t\tif [[ ${COMP_WORDS[i + 1]} == = ]]; then",
            "\t\t\t\t((i += 2))",
            "\t\t\telif [[ $w != *=* && \" $opts \" == *\" $w= \"* ]]; then",
            "\t\t\t\t((i++))",
            "\t\t\tfi",
            "\t\telif [[ -z $cmd ]]; then",
            "\t\t\tcmd=$w opts=$(_airlock_options \"$cmd\")",
            "\t\telif [[ -z $sub && -n $(_airlock_subcommands \"$cmd\") ]]; then",
            "\t\t\tsub=$w",
            "\t\telse",
            "\t\t\t((npos++))",
            "\t\tfi",
            "\tdone",
            "\tif [[ -n $opt ]]; then",
            "\t\t_airlock_value \"$cmd\" \"$opt\" \"$cur\"",
            "\t\treturn 0",
            "\tfi",
            "\tif ((!dashdash)) && [[ $prev == --* && $cur != -* ]] &&",
            "\t\t[[ \" $opts \" == *\" $prev= \"* ]]; then",
            "\t\t_airlock_value \"$cmd\" \"$prev\" \"$cur\"",
            "\t\treturn 0",
            "\tfi",
            "\tif [[ -z $cmd ]]; then",
            "\t\tif [[ $cur == -* ]]; then",
            "\t\t\tmapfile -t COMPREPLY < <(compgen -W '--help --version' -- \"$cur\")",
            "\t\telse",
            f"\t\t\tmapfile -t COMPREPLY < <(compgen -W {sh_quote(' '.join(names))} -- \"$cur\")",
            "\t\tfi",
            "\t\treturn 0",
            "\tfi",
            "\tif ((!dashdash)) && [[ $cur == -* ]]; then",
            "\t\tmapfile -t COMPREPLY < <(compgen -W \"$opts\" -- \"$cur\")",
            "\t\tif [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *= ]]; then",
            "\t\t\tcompopt -o nospace 2>/dev/null",
            "\t\tfi",
            "\t\treturn 0",
            "\tfi",
            "\tlocal subs",
            "\tsubs=$(_airlock_subcommands \"$cmd\")",
            "\tif [[ -z $sub && -n $subs ]]; then",
            "\t\tmapfile -t COMPREPLY < <(compgen -W \"$subs\" -- \"$cur\")",
            "\t\treturn 0",
            "\tfi",
            "\t((dashdash)) && return 0",
            "\tcase $(_airlock_positional \"$cmd\" \"$sub\" $((npos + 1))) in",
            "\tsandbox)",
            "\t\tmapfile -t COMPREPLY < <(compgen -W \"$(_airlock_sandbox_ids "
            "\"${COMP_WORDS[0]}\")\" -- \"$cur\") ;;",
            "\tfile)",
            "\t\tmapfile -t COMPREPLY < <(compgen -f -- \"$cur\")",
            "\t\tcompopt -o filenames 2>/dev/null ;;",
            "\tesac",
            "\treturn 0",
            "}", "",
            "complete -F _airlock airlock", ""]
    return "\n".join(out)


# ---- zsh ----

def zq(s):
    return "'" + s.replace("'", "'\\''") + "'"


def z_desc(text):
    """The first line of a help text, for a [description]."""
    first = (text or "").split("\n")[0].strip()
    return first.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def z_msg(text):
    return text.replace("\\", "\\\\").replace(":", "\\:")


def z_value_fn(cname, o):
    return f"_airlock_value_{cname}_{o['name']}".replace("-", "_")


def z_option(cname, o):
    if not o["arg"]:
        spec = zq(f"*--{o['name']}[{z_desc(o['help'])}]")
        if o.get("short"):
            spec += " " + zq(f"*-{o['short']}[{z_desc(o['help'])}]")
        return spec
    k = value_kind(cname, o)
    # An action holds no ':' (it would end it): words and directories
    # together go through a function of their own.
    if not k:
        action = " "
    elif k[0] == "words":
        action = z_value_fn(cname, o) if k[2] else "(" + " ".join(k[1]) + ")"
    elif k[0] == "dirs":
        action = "_files -/"
    else:
        action = "_files"
    return zq(f"*--{o['name']}=[{z_desc(o['help'])}]:{z_msg(o['arg'])}:{action}")


def z_value_fns(cname, c):
    out = []
    for o in all_options(c):
        k = value_kind(cname, o) if o["arg"] else None
        if k and k[0] == "words" and k[2]:
            words = zq("words:value:(" + " ".join(k[1]) + ")")
            out += [f"{z_value_fn(cname, o)}() {{",
                    f"  _alternative {words} 'dirs:directory:_files -/'", "}", ""]
    return out


def zsh(top, cmds):
    out = ["#compdef airlock",
           "# zsh completion for airlock: generated by scripts/gendoc.py from the",
           "# programs' option tables (the same as their --help); do not edit.", "",
           "# The sandboxes' ids, from `airlock sandbox list --json` (none when it",
           "# cannot list them: not root, no state directory).",
           "_airlock_sandbox_ids() {",
           "  local -a ids",
           "  ids=(${(f)\"$(timeout 2 ${_airlock_prog:-airlock} sandbox list --json 2>/dev/null |",
           "    grep -o '\"id\":\"[0-9a-f]*\"' | cut -d'\"' -f4)\"})",
           "  _describe -t sandboxes 'sandbox id' ids",
           "}", ""]
    for name, c in cmds.items():
        if name == "airlock":
            continue
        fn = "_airlock_" + name.replace("-", "_")
        out += z_value_fns(name, c)
        opts = " \\\n    ".join(z_option(name, o) for o in all_options(c))
        out.append(f"{fn}() {{")
        out.append("  local curcontext=$curcontext state line ret=1")
        out.append(f"  local -a opts=(\n    {opts}\n  )")
        if c["subcommands"]:
            subs = " ".join(c["subcommands"])
            out += ["  _arguments -C \\",
                    f"    {zq('1:subcommand:(' + subs + ')')} \\",
                    "    '*::argument:->args' && ret=0",
                    "  [[ $state == args ]] || return ret",
                    "  case $words[1] in"]
            for (cname, sub), kinds in POSITIONALS.items():
                if cname != name:
                    continue
                specs = []
                for i, k in enumerate(kinds, 1):
                    pos = "*" if k.endswith("...") else str(i)
                    act = "_airlock_sandbox_ids" if k.startswith("sandbox") else "_files"
                    what = "sandbox id" if k.startswith("sandbox") else "file"
                    specs.append(zq(f"{pos}:{what}:{act}"))
                out.append(f"  {sub}) _arguments -s -S $opts {' '.join(specs)} && ret=0 ;;")
            out += ["  *) _arguments -s -S $opts '*:argument:_files' && ret=0 ;;",
                    "  esac",
                    "  return ret",
                    "}", ""]
        else:
            out += ["  _arguments -s -S $opts '*:argument:_files' && ret=0",
                    "  return ret", "}", ""]
    described = " \\\n    ".join(zq(t["name"] + ":" + t["summary"].replace(":", "\\:"))
                                for t in top)
    out += ["_airlock() {",
            "  local curcontext=$curcontext state line ret=1",
            "  local _airlock_prog=$words[1]  # for _airlock_sandbox_ids",
            f"  local -a commands=(\n    {described}\n  )",
            "  _arguments -C \\",
            "    '(- 1 *)--help[print the commands]' \\",
            "    '(- 1 *)--version[print the version]' \\",
            "    '1:command:->command' \\",
            "    '*::argument:->args' && ret=0",
            "  case $state in",
            "  command) _describe -t commands 'airlock command' commands && ret=0 ;;",
            "  args)",
            "    curcontext=${curcontext%:*:*}:airlock-$words[1]:",
            "    case $words[1] in"]
    for name in cmds:
        if name != "airlock":
            out.append(f"    {name}) _airlock_{name.replace('-', '_')} && ret=0 ;;")
    out += ["    esac ;;",
            "  esac",
            "  return ret",
            "}", "",
            "if [[ $funcstack[1] == _airlock ]]; then",
            "  _airlock \"$@\"",
            "else",
            "  compdef _airlock airlock",
            "fi", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", nargs="+", required=True)
    ap.add_argument("--from", dest="sources", nargs="+", required=True)
    a = ap.parse_args()
    version, top, cmds = model([load(s) for s in a.sources])
    pages = ["airlock"] + [f"airlock-{n}" for n in cmds if n != "airlock"]
    texts = {"airlock.1": top_page(top, cmds, pages[1:], version),
             "airlock": bash(top, cmds), "_airlock": zsh(top, cmds)}
    for n, c in cmds.items():
        if n != "airlock":
            texts[f"airlock-{n}.1"] = command_page(c, pages[1:], version)
    want = {os.path.basename(o): o for o in a.out}
    if set(want) != set(texts):
        missing = sorted(set(texts) - set(want))
        extra = sorted(set(want) - set(texts))
        fail("the outputs in src/cli/doc/meson.build do not match the commands: " +
             (f"add {', '.join(missing)}" if missing else "") +
             ("; " if missing and extra else "") +
             (f"remove {', '.join(extra)}" if extra else ""))
    for name, path in want.items():
        with open(path + ".tmp", "w") as f:
            f.write(texts[name])
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
