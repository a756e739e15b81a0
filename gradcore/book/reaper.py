"""Run one command and wait for every process it leaves behind, so that their CPU time is counted.

A job's CPU seconds come from ``os.wait4`` on its process (:mod:`gradcore.book.jobs`): they
include every descendant that its parent waited for, and none that was orphaned. A Flower
deployment orphans its work: a SuperNode stopped by PID leaves its app processes to init, and
their CPU time went uncounted (measured on 2 cores: the Flower chapter used about 170 CPU seconds
machine-wide and its job reported 91). Run as ``python reaper.py COMMAND...``, this process
becomes a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), so that orphans below it are
re-parented to it; it reaps them as they end, waits for the rest after the command ends, and
exits with the command's status.

Run by path, not as ``-m gradcore.book.reaper``: it imports only the standard library, so it adds
a Python start (tens of milliseconds) to a job, not gradcore's imports. Elsewhere than Linux it
only runs the command.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
import time

#: ``prctl`` option (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36
#: Seconds to wait, after the command ends, for the processes it left running; a process still
#: running then is a leak, reported and left alone (the checks that look for leaked processes
#: still see it).
GRACE_SECONDS = 30.0


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants; False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no prctl (not Linux)
        return False


def run_and_reap(command: list[str], grace: float | None = None) -> tuple[int, list[int]]:
    """Run ``command``; reap every child of this process as it ends (the command and, while this
    process is a subreaper, the orphans it adopts: reaped at once, as init would, since code that
    stops a process often waits for its PID to vanish). After the command ends, wait up to
    ``grace`` seconds (:data:`GRACE_SECONDS` by default) for the rest. Returns the command's wait
    status and the PIDs still running then.
    """
    # As subprocess does: the signals Python ignores (a closed pipe) act again in the command.
    restored = [getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)]
    child = os.posix_spawnp(command[0], command, os.environ, setsigdef=restored)
    status = None
    deadline = math.inf
    while True:
        blocking = status is None
        try:
            pid, code = os.waitpid(-1, 0 if blocking else os.WNOHANG)
        except ChildProcessError:  # none left
            return status, []
        if pid == child:
            status = code
            deadline = time.monotonic() + (GRACE_SECONDS if grace is None else grace)
        elif not pid:
            if time.monotonic() > deadline:
                return status, _children()
            time.sleep(0.05)


def _children() -> list[int]:
    """PIDs whose parent is this process (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    # The command name may hold spaces: the parent PID follows its closing ")".
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found.append(int(entry))
    return found


def main(command: list[str]) -> int:
    if not command:
        print("usage: python reaper.py COMMAND [ARGUMENT ...]", file=sys.stderr)
        return 2
    become_subreaper()
    try:
        status, left = run_and_reap(command)
    except OSError as error:  # not found, not executable
        print(f"reaper: cannot run {command[0]!r}: {error}", file=sys.stderr)
        return 127
    if left:
        print(
            f"reaper: {len(left)} process(es) left running by {command[0]} "
            f"(PIDs {', '.join(map(str, left))}); their CPU time is not counted",
            file=sys.stderr,
        )
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way, so the job's status says which
        if -code != signal.SIGKILL:  # the one whose action cannot be set
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
