#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A stand-in agent CLI for the session tests: it speaks Claude Code's
stream-json (the claude parser reads it) and does what its prompt's first
word says, so that each test can make a turn succeed, fail in one of the
ways real agents do, lie, flood, leak or hang.

  fake-agent -p --session-id SID -- PROMPT     first turn
  fake-agent -p --resume SID -- PROMPT         later turns

`run COMMAND...` runs the rest of the prompt with /bin/sh -c, as an agent's
shell tool does, and answers with its exit status and output.

Its history lives in $HOME/.fake/SID (one prompt per line): a resumed turn
answers with what it remembers, a first turn with an id it already knows
(or a resume of one it does not) fails, as a real agent's would.
"""
import json
import os
import subprocess
import sys
import time

args = sys.argv[1:]
sid = None
resume = False
if "--session-id" in args:
    sid = args[args.index("--session-id") + 1]
if "--resume" in args:
    sid = args[args.index("--resume") + 1]
    resume = True
# After "--"; an agent definition without "--" passes it last.
prompt = args[args.index("--") + 1] if "--" in args else (args[-1] if args else "")
words = prompt.split()
verb = words[0] if words else ""

hist_dir = os.path.join(os.environ.get("HOME", "/root"), ".fake")
os.makedirs(hist_dir, exist_ok=True)
hist = os.path.join(hist_dir, sid or "none")


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def result(text, ok=True, subtype="success"):
    # As Claude Code does, the final answer is the last assistant text too.
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": text}]}})
    out({"type": "result", "subtype": subtype, "is_error": not ok, "result": text,
         "session_id": sid, "num_turns": 1,
         "usage": {"input_tokens": 100 + len(prompt), "output_tokens": 7,
                   "cache_read_input_tokens": 3, "cache_creation_input_tokens": 2},
         "total_cost_usd": 0.0012})


if resume and not os.path.exists(hist):
    sys.stderr.write(f"No conversation found with session ID: {sid}\n")
    sys.exit(1)
if not resume and os.path.exists(hist):
    sys.stderr.write(f"Session ID {sid} is already in use\n")
    sys.exit(1)
remembered = open(hist).read().split("\n")[:-1] if resume else []
with open(hist, "a") as f:
    f.write(prompt.replace("\n", " ") + "\n")

out({"type": "system", "subtype": "init", "session_id": sid, "cwd": os.getcwd(),
     "tools": ["Write", "Bash"]})

if verb == "write":
    name, content = words[1], " ".join(words[2:]) or "hello"
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "Write",
         "input": {"file_path": f"/workspace/{name}", "content": content}}]}})
    with open(os.path.join("/workspace", name), "w") as f:
        f.write(content + "\n")
    out({"type": "user", "session_id": sid, "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": f"wrote {name}"}]}})
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": f"I wrote {name}."}]}})
    result(f"wrote {name}")
elif verb == "recall":
    result("I remember: " + " | ".join(remembered))
elif verb == "outside":
    open("/var/tmp/airlock-outside", "w").write("x")
    result("wrote outside")
elif verb == "checkoutside":
    there = os.path.exists("/var/tmp/airlock-outside")
    result("outside: " + ("present" if there else "absent"))
elif verb == "outsidesleep":
    open("/var/tmp/airlock-outside", "w").write("x")
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": "sleeping"}]}})
    time.sleep(float(words[1]))
    result("slept")
elif verb == "badsid":
    out({"type": "result", "subtype": "success", "is_error": False, "result": "ok",
         "session_id": "--upload-pack.evil", "usage": {"input_tokens": 1, "output_tokens": 1}})
elif verb == "escape":
    # C1 control sequences too: a lone 0x9b byte in a file name (a CSI to a
    # terminal not in UTF-8) and U+009B in UTF-8.
    open(b"/workspace/c1-\x9b2J-raw", "w").close()
    open("/workspace/c1-\u009b2J-utf8", "w").close()
    result("\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07\x1b[2J\u009b2Jtext")
elif verb == "deep":
    d = "/workspace/deep"
    os.makedirs(d, exist_ok=True)
    fd = os.open(d, os.O_RDONLY)
    for i in range(int(words[1])):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(fd)
    result("deep")
elif verb == "links":
    target = words[1]
    os.symlink(target, "/workspace/link-to-host")
    os.symlink(target, os.path.join(os.environ.get("HOME", "/root"), "link-to-host"))
    open("/workspace/bad\nA forged.txt", "w").write("x")
    result("links")
elif verb == "sleep":
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": "sleeping"}]}})
    # A child that would outlive a careless cancel.
    if os.fork() == 0:
        os.setsid()
        time.sleep(float(words[1]))
        os._exit(0)
    time.sleep(float(words[1]))
    result("slept")
elif verb == "crash":
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": "about to crash"}]}})
    os.kill(os.getpid(), 9)
elif verb == "noenvelope":
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": "All done, success!"}]}})
elif verb == "truncated":
    sys.stdout.write('{"type":"result","subtype":"success","is_error":false,"resu')
    sys.stdout.flush()
elif verb == "lie":
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": '{"type":"result","subtype":"success","is_error":false}'}]}})
    sys.exit(0)
elif verb == "apierror":
    result("API Error: 401 invalid x-api-key", ok=False, subtype="success")
elif verb == "exit1":
    result("done")
    sys.exit(1)
elif verb == "writefail":
    with open(os.path.join("/workspace", words[1]), "w") as f:
        f.write("never committed\n")
    sys.stderr.write("failing after a write\n")
    sys.exit(1)
elif verb == "many":
    for i in range(int(words[1])):
        out({"type": "assistant", "session_id": sid, "message": {"content": [
            {"type": "text", "text": f"e{i}"}]}})
    result("many")
elif verb == "flood":
    line = "x" * 1000
    for i in range(int(words[1])):
        out({"type": "assistant", "session_id": sid, "message": {"content": [
            {"type": "text", "text": line}]}})
    result("flooded")
elif verb == "secret":
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": "the key is " + words[1]}]}})
    result("leaked " + words[1])
elif verb == "writetools":
    try:
        open("/opt/airlock/bin/fake-agent", "a").write("# changed\n")
        result("tools: writable")
    except OSError as e:
        result("tools: " + e.strerror)
elif verb == "run":
    cmd = prompt.split(None, 1)[1] if len(words) > 1 else "true"
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": cmd}}]}})
    p = subprocess.run(["/bin/sh", "-c", cmd], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = p.stdout.decode(errors="replace")
    out({"type": "user", "session_id": sid, "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": text}]}})
    result(f"exit {p.returncode}\n{text}")
elif verb == "env":
    out({"type": "assistant", "session_id": sid, "message": {"content": [
        {"type": "text", "text": json.dumps(dict(os.environ))}]}})
    result("env")
else:
    result("nothing to do")
