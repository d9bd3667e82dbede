"""A run's tree attacking its own records and control sockets (tests/trust.rs).

Each command proves it ran by writing a file the test waits for. Requests are sent the way
reaper's askers send them: a line on a stream connection, or one datagram to a datagram
socket (the older protocol), whichever the socket takes.
"""
import errno
import json
import os
import socket
import sys
import time

FAKE_DONE = b'done {"stop_reason":"stopped","killed":0,"survivors":0,"exit_code":null,"signal":null}'


def run_id():
    return os.environ["REAPER_RUN_ID"]


def records_dir(required=True):
    """The directory holding this run's record, once the owner has written it; `None` when
    it cannot be seen from here (a sandbox that hides it) and `required` is false."""
    d = os.environ.get("REAPER_RUNTIME_DIR")
    uid = os.geteuid()
    if d:
        cands = [d]
    elif uid == 0:
        cands = ["/run/reaper", "/tmp/reaper-0"]
    else:
        cands = ["/run/user/%d/reaper" % uid, "/tmp/reaper-%d" % uid]
    for _ in range(200):
        for c in cands:
            if os.path.exists(os.path.join(c, run_id() + ".json")):
                return c
        time.sleep(0.025)
    if required:
        sys.exit("hostile.py: no record of %s in %s" % (run_id(), cands))
    return None


def done(path, text):
    with open(path + ".part", "w") as f:
        f.write(text)
    os.rename(path + ".part", path)


def send(path, word):
    """Sends `word` to the socket at `path`; the first answer, or why there is none."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(path)
        s.sendall(word.encode() + b"\n")
        return s.makefile("rb").readline().decode().strip() or "no answer"
    except OSError as e:
        if e.errno != errno.EPROTOTYPE:
            return "error: %s" % e
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    d.bind("\0reaper-hostile-%d-%d" % (os.getpid(), time.monotonic_ns()))
    d.settimeout(5)
    try:
        d.sendto(word.encode(), path)
        return d.recv(4096).decode().strip()
    except OSError as e:
        return "no answer: %s" % e


def link_everything(d, victim):
    """The names reaper writes beside the record, each a link to `victim`."""
    rid = run_id()
    for name in [rid + ".json.tmp", rid + ".stopped"]:
        try:
            os.symlink(victim, os.path.join(d, name))
        except FileExistsError:
            pass


def retarget(pid, start, planted):
    """Names `pid` as the run's leader, without a cgroup, and deletes the socket."""
    d = records_dir()
    rid = run_id()
    p = os.path.join(d, rid + ".json")
    with open(p) as f:
        r = json.load(f)
    r.update(leader_pid=int(pid), leader_starttime=int(start), cgroup=None, backend="pgid")
    with open(p + ".x", "w") as f:
        json.dump(r, f)
    os.rename(p + ".x", p)
    try:
        os.unlink(os.path.join(d, rid + ".sock"))
    except FileNotFoundError:
        pass
    done(planted, rid)
    time.sleep(600)


def send_own(word, victim, answer):
    """Links the record's temporary name (and the notes') to `victim`, then asks its own
    owner to `word` the run; exits 0 a moment later."""
    d = records_dir(required=False)
    if d is None:
        done(answer, "unreachable: the records directory cannot be seen from the run")
    else:
        if victim != "-":
            link_everything(d, victim)
        done(answer, send(os.path.join(d, run_id() + ".sock"), word))
    time.sleep(1)


def send_all(word, answer):
    """Sends `word` to every other run's socket in the records directory."""
    d = records_dir(required=False)
    if d is None:
        done(answer, "unreachable: the records directory cannot be seen from the run")
        return
    mine = run_id() + ".sock"
    answers = []
    for n in sorted(os.listdir(d)):
        if n.endswith(".sock") and n != mine:
            answers.append("%s: %s" % (n, send(os.path.join(d, n), word)))
    done(answer, "\n".join(answers) or "no other socket")


def impostor(mode, victim, swap_to, ready):
    """Takes the run's socket over (`dgram` or `stream`), links the notes to `victim`, and on a
    request either moves the records directory away for a link to `swap_to` (`-`: no) and
    stays silent, or answers as the owner would that the run was stopped."""
    d = records_dir()
    rid = run_id()
    if victim != "-":
        link_everything(d, victim)
    path = os.path.join(d, rid + ".sock")
    os.unlink(path)
    kind = socket.SOCK_DGRAM if mode == "dgram" else socket.SOCK_STREAM
    s = socket.socket(socket.AF_UNIX, kind)
    s.bind(path)
    if kind == socket.SOCK_STREAM:
        s.listen(8)
    done(ready, rid)
    while True:
        if kind == socket.SOCK_DGRAM:
            _, addr = s.recvfrom(64)
            answer = lambda m: s.sendto(m, addr)
        else:
            c, _ = s.accept()
            c.recv(64)
            answer = lambda m: c.sendall(m + b"\n")
        if swap_to != "-":
            os.rename(d, d + ".moved")
            os.symlink(swap_to, d)
            time.sleep(600)
        try:
            answer(b"ok stop")
            answer(FAKE_DONE)
        except OSError:
            pass


def note(kind, planted):
    """Puts a fifo, or a huge sparse file, where the owner reads the note of an outside stop;
    then exits."""
    p = os.path.join(records_dir(), run_id() + ".stopped")
    if kind == "fifo":
        os.mkfifo(p, 0o600)
    else:
        with open(p, "wb") as f:
            f.truncate(1 << 30)
    done(planted, run_id())


def flood(n, planted):
    """Opens `n` connections to its own run's socket and holds them, sending nothing; then
    sleeps."""
    path = os.path.join(records_dir(), run_id() + ".sock")
    held = []
    for _ in range(int(n)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except OSError:
            pass
        held.append(s)
    done(planted, run_id())
    time.sleep(600)


cmd, args = sys.argv[1], sys.argv[2:]
{
    "retarget": retarget,
    "send-own": send_own,
    "send-all": send_all,
    "impostor": impostor,
    "note": note,
    "flood": flood,
}[cmd](*args)
