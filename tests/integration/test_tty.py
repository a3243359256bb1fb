"""`sandbox run -t` and `sandbox exec -t`: a terminal of the sandbox's own.

Each test drives airlock through a pseudo-terminal of its own, as a user's
terminal emulator would: it types, resizes the window, presses Ctrl-C and
Ctrl-Z, and checks what comes back, that the user's terminal is back in the
mode it was in, and that nothing inside the sandbox ever held it.
"""
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from conftest import deadline_poll, uid_range_processes


class Term:
    """airlock on a pseudo-terminal: the test holds the master (the
    'keyboard and screen'), airlock gets the slave as its controlling
    terminal and stdio."""

    def __init__(self, airlock, *args, rows=33, cols=101):
        self.master, self.slave = os.openpty()
        self.resize(rows, cols)
        self.initial = termios.tcgetattr(self.slave)
        env = dict(airlock.env, TERM="xterm")
        slave = self.slave

        def ctty():
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen([airlock.bin, *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, preexec_fn=ctty, close_fds=True)
        self.buf = b""

    def resize(self, rows, cols):
        # On the master: the kernel tells the terminal's foreground group
        # (airlock) with SIGWINCH.
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def send(self, data):
        os.write(self.master, data)

    def expect(self, pattern, timeout=20):
        """Reads until the regex pattern (bytes) matches what came since the
        last expect; returns the match."""
        end = time.monotonic() + timeout
        rx = re.compile(pattern, re.S)
        while True:
            m = rx.search(self.buf)
            if m:
                self.buf = self.buf[m.end():]
                return m
            left = end - time.monotonic()
            assert left > 0, f"timed out waiting for {pattern!r}; screen: {self.buf[-2000:]!r}"
            r, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if r:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    data = b""
                if not data:
                    assert False, f"terminal closed waiting for {pattern!r}: {self.buf!r}"
                self.buf += data

    def mode(self):
        return termios.tcgetattr(self.slave)

    def is_raw(self):
        lflag = self.mode()[3]
        return not (lflag & termios.ICANON) and not (lflag & termios.ECHO)

    def wait(self, timeout=30):
        rc = self.proc.wait(timeout=timeout)
        # Drain what is left, so that a failure shows it.
        while select.select([self.master], [], [], 0)[0]:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                break
            if not data:
                break
            self.buf += data
        return rc

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def sandbox_holds_tty(slave, session):
    """Processes of the sandboxes (uid in the tests' ranges) that have the
    user's terminal open, or in whose session it is the controlling
    terminal. (Its path and number say nothing: the sandbox's own
    terminal may be /dev/pts/0 of another devpts instance.)"""
    mine = os.fstat(slave)
    found = []
    for pid, _ in uid_range_processes():
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2:].split()[3]) == session:
                found.append((pid, "in the terminal's session"))
            for fd in os.listdir(f"/proc/{pid}/fd"):
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                    found.append((pid, f"fd {fd}"))
        except OSError:
            pass
    return found


def sandbox_commands(airlock, sid):
    """The names of the processes of sandbox sid (uid in its range), as the
    host sees them: every pid namespace of the sandbox's at once."""
    first, last = json.loads(airlock.sandbox("inspect", sid, "--json", check=True).stdout)["uids"]
    names = []
    for pid, _ in uid_range_processes(first, last + 1):
        try:
            with open(f"/proc/{pid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


def prompt(t, marker):
    """Waits for the shell to print marker (an echo of ours, so the typed
    line's own echo does not count: the marker is split in the command)."""
    return t.expect(re.escape(marker.encode()))


def test_run_tty_is_a_terminal_with_job_control(airlock):
    t = Term(airlock, "sandbox", "run", "-t", "--", "bash", "--norc", "--noprofile", "-i")
    try:
        t.send(b"PS1='$ '; echo RE''ADY\n")
        prompt(t, "READY")
        # airlock's side is raw while the command runs: keys go inside.
        deadline_poll(t.is_raw, 10, "the user's terminal in raw mode")
        # The command's terminal: a devpts of the sandbox's own, with the
        # window size of the user's, and job control in the shell.
        t.send(b"stty size; tty; ls /dev/pts; case $- in *m*) echo JOB''S-ON;; esac\n")
        m = t.expect(rb"(\d+) (\d+)\r\n(/dev/pts/\d+)\r\n(.*?)JOBS-ON", timeout=20)
        assert (m.group(1), m.group(2)) == (b"33", b"101")
        assert m.group(3) == b"/dev/pts/0"
        assert m.group(4).split() == [b"0", b"ptmx"], m.group(4)
        # Nothing inside holds the user's terminal, as a descriptor or as
        # a controlling terminal.
        assert uid_range_processes(), "no process of the sandbox found to check"
        assert sandbox_holds_tty(t.slave, t.proc.pid) == []  # (airlock leads its session)
        # TIOCSTI on its own terminal is refused all the same.
        t.send(b"python3 -c 'import fcntl,termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")' "
               b"2>&1 | tail -1; echo STI''-DONE\n")
        m = t.expect(rb"(.*)\r\nSTI-DONE")
        assert b"PermissionError" in m.group(1), m.group(1)
        # A new window size reaches the command.
        t.resize(40, 120)
        deadline_poll(lambda: (t.send(b"echo S=$(stty size)=\n"), t.expect(rb"S=(\d+ \d+)="))[1]
                      .group(1) == b"40 120", 10, "the new window size inside")
        # Ctrl-C ends the foreground job, not the shell nor the sandbox.
        t.send(b"sleep 100\n")
        time.sleep(0.3)  # (the key must come after sleep is the foreground job)
        t.send(b"\x03")
        t.send(b"echo rc=$?\n")
        t.expect(rb"rc=130")
        # Ctrl-Z stops it; fg brings it back; Ctrl-C then ends it.
        t.send(b"sleep 100\n")
        time.sleep(0.3)
        t.send(b"\x1a")
        t.expect(rb"Stopped\s+sleep 100")
        t.send(b"jobs; echo JO''BS-LISTED\n")
        t.expect(rb"\[1\]\+\s+Stopped\s+sleep 100\r\nJOBS-LISTED")
        t.send(b"fg\n")
        t.expect(rb"sleep 100\r\n")
        time.sleep(0.3)
        t.send(b"\x03")
        t.send(b"echo rc=$?; exit 7\n")
        t.expect(rb"rc=130")
        assert t.wait() == 7
        assert t.mode() == t.initial, "the user's terminal was left in another mode"
    finally:
        t.close()


def test_exec_tty_ctrl_c_never_ends_the_sandbox(airlock):
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    try:
        t = Term(airlock, "sandbox", "exec", "-t", sid, "--", "bash", "--norc", "-i")
        try:
            t.send(b"PS1='$ '; echo RE''ADY\n")
            prompt(t, "READY")
            t.send(b"sleep 100\n")
            time.sleep(0.3)
            t.send(b"\x03")
            t.send(b"echo rc=$?; exit 3\n")
            t.expect(rb"rc=130")
            assert t.wait() == 3
            assert t.mode() == t.initial
        finally:
            t.close()
        # The sandbox is still there and runs the next command.
        p = airlock.sandbox("exec", sid, "--", "echo", "still-here")
        assert p.returncode == 0 and p.stdout == b"still-here\n", p
    finally:
        airlock.sandbox("destroy", sid)


def test_a_repl_works_under_tty(airlock):
    t = Term(airlock, "sandbox", "run", "-t", "--", "python3", "-q")
    try:
        t.expect(rb">>> ")
        deadline_poll(t.is_raw, 10, "the user's terminal in raw mode")
        t.send(b"6 * 7\n")
        t.expect(rb"\r\n42\r\n>>> ")
        # Ctrl-C is a KeyboardInterrupt in the REPL, which goes on. (Not
        # at once: a SIGINT between the prompt and the REPL's wait for a
        # key is only noticed at the next key, Python's own race.)
        time.sleep(0.5)
        t.send(b"\x03")
        t.expect(rb"KeyboardInterrupt\r\n>>> ")
        t.send(b"import sys; sys.stdout.isatty(), sys.stdin.isatty()\n")
        t.expect(rb"\(True, True\)\r\n>>> ")
        # Ctrl-D ends it.
        t.send(b"\x04")
        assert t.wait() == 0
        assert t.mode() == t.initial
    finally:
        t.close()


def test_tty_mode_restored_when_the_command_crashes(airlock):
    t = Term(airlock, "sandbox", "run", "-t", "--", "bash", "--norc", "-i")
    try:
        t.send(b"echo RE''ADY\n")
        prompt(t, "READY")
        deadline_poll(t.is_raw, 10, "the user's terminal in raw mode")
        t.send(b"kill -SEGV $$\n")
        assert t.wait() == 128 + signal.SIGSEGV
        assert t.mode() == t.initial
    finally:
        t.close()


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT, signal.SIGPWR,
                                 signal.SIGRTMIN + 2])
def test_tty_mode_restored_when_airlock_itself_crashes(airlock, sig):
    if sig == signal.SIGSEGV and "ASAN_OPTIONS" in airlock.env:
        pytest.skip("built with AddressSanitizer, whose own SIGSEGV handler reports and "
                    "aborts (the SIGABRT case covers that way out)")
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    try:
        t = Term(airlock, "sandbox", "exec", "-t", sid, "--", "bash", "--norc", "-i")
        try:
            t.send(b"echo RE''ADY\n")
            prompt(t, "READY")
            deadline_poll(t.is_raw, 10, "the user's terminal in raw mode")
            # A fatal signal to airlock: it dies of it, the terminal's mode
            # comes back first.
            os.kill(t.proc.pid, sig)
            assert t.wait() == -sig
            assert t.mode() == t.initial
        finally:
            t.close()
        # Its command went with it (nothing of an exec outlives its
        # client), as seen from the host; the sandbox stays.
        deadline_poll(lambda: "bash" not in sandbox_commands(airlock, sid), 10,
                      "the shell to end")
        p = airlock.sandbox("exec", sid, "--", "true")
        assert p.returncode == 0, p
    finally:
        airlock.sandbox("destroy", sid)


def test_tty_without_a_terminal(airlock):
    # -t with pipes: the command still gets a terminal (24x80), its output
    # and errors both arrive on stdout, and nothing is changed on our side.
    p = airlock.run("-t", "--", "sh", "-c", "stty size; tty; echo err >&2; read x; echo got $x",
                    input=b"hello\n")
    assert p.returncode == 0, p
    lines = p.stdout.replace(b"\r\n", b"\n").decode().splitlines()
    # The terminal echoes what came in, whenever it came.
    lines.remove("hello")
    assert lines == ["24 80", "/dev/pts/0", "err", "got hello"], p.stdout
    assert p.stderr == b""
    # The end of the input reaches the command, a last line without its
    # newline included (the terminal's end-of-file character, twice then).
    p = airlock.run("-t", "--", "cat", input=b"a\nb", timeout=30)
    assert p.returncode == 0, p
    assert p.stdout.replace(b"\r\n", b"\n").endswith(b"a\nb"), p.stdout


def test_tty_option_errors(airlock):
    p = airlock.sandbox("exec", "-t")
    assert p.returncode == 125
    assert p.stderr == b"airlock: sandbox exec needs an id\n"
    p = airlock.sandbox("create", "-t")
    assert p.returncode == 125
    assert p.stderr == (b"airlock: option -t does not apply here "
                        b"(see `airlock sandbox --help`)\n")
    h = airlock.sandbox("--help").stdout.decode()
    assert "  -t, --tty " in h


def test_raw_again_after_a_stop_and_continue(airlock):
    t = Term(airlock, "sandbox", "run", "-t", "--", "bash", "--norc", "-i")
    try:
        t.send(b"echo RE''ADY\n")
        prompt(t, "READY")
        deadline_poll(t.is_raw, 10, "the user's terminal in raw mode")
        # Stopped from outside; meanwhile the shell that would continue it
        # puts its own (cooked) mode back; continued, it is raw again.
        os.kill(t.proc.pid, signal.SIGSTOP)
        termios.tcsetattr(t.slave, termios.TCSANOW, t.initial)
        assert not t.is_raw()
        os.kill(t.proc.pid, signal.SIGCONT)
        deadline_poll(t.is_raw, 10, "raw mode again")
        t.send(b"exit 5\n")
        assert t.wait() == 5
        assert t.mode() == t.initial
    finally:
        t.close()
