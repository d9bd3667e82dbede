"""How a run ended, as the library's ``Outcome`` says."""

import collections

Process = collections.namedtuple("Process", "pid starttime comm")
Process.__doc__ = "A process, named by pid and start time (which no later process with its pid shares)."
Escapee = collections.namedtuple("Escapee", "process to")
Escapee.__doc__ = "A process that left the run's cgroup, and the cgroup it moved to."
Limits = collections.namedtuple("Limits", "memory_max pids_max cpus", defaults=(None, None, None))
Limits.__doc__ = """Caps on the run's whole tree (they need the cgroup backend): ``memory_max`` in
bytes, ``pids_max`` processes, ``cpus`` (1.5 = one and a half CPUs)."""


class Outcome:
    """How a run ended.

    ``returncode`` is ``subprocess``'s: the leader's exit status, or ``-N`` if signal N
    killed it. ``stop_reason``: ``"exited"`` (the leader exited by itself), ``"timeout"``,
    ``"cancel"`` (``terminate()``/``kill()``, or the handle's end), ``"signal"``, ``"oom"``,
    ``"killed"``, ... ``killed`` counts the processes reaper killed, ``survivors`` lists what
    outlived SIGKILL (empty unless something is badly wrong), ``escapees`` the processes seen
    outside the run's cgroup. ``duration``, ``leader_ran`` and ``teardown`` are seconds.
    ``usage`` (a dict) has the cgroup's figures (memory peak, CPU time, OOM kills).
    """

    __slots__ = ("argv", "backend", "cgroup", "scope", "leader_pid", "leader_status",
                 "stop_reason", "received_signal", "duration", "leader_ran", "teardown",
                 "killed", "survivors", "escapees", "error", "guardian_pid", "limits", "usage",
                 "exit_code", "returncode")

    def __init__(self, d):
        for k in ("argv", "backend", "cgroup", "scope", "leader_pid", "stop_reason",
                  "received_signal", "duration", "leader_ran", "teardown", "killed", "error",
                  "guardian_pid", "usage", "exit_code"):
            setattr(self, k, d[k])
        self.leader_status = d["leader_status"]
        self.survivors = [Process(*p) for p in d["survivors"]]
        self.escapees = [Escapee(Process(*p), to) for p, to in d["escapees"]]
        self.limits = None if d["limits"] is None else Limits(*d["limits"])
        status = self.leader_status
        if status is None:
            # The leader's status was not read (it should be): timeout(1)'s status stands in.
            self.returncode = self.exit_code
        elif status[0] == "signal":
            self.returncode = -status[1]
        else:
            self.returncode = status[1]

    def __repr__(self):
        return ("Outcome(returncode=%r, stop_reason=%r, backend=%r, killed=%d, survivors=%d, "
                "duration=%.3f)" % (self.returncode, self.stop_reason, self.backend, self.killed,
                                    len(self.survivors), self.duration))
