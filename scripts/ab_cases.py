#!/usr/bin/env python3
"""The timed cases of scripts/gpu-ab: each case in rounds 1, 2, .. (--rounds, default 2), and in
each round in every tree in turn (A, B, C, .. per case; round r starts at tree r mod n), through one warm `bench/profile_case.py
--serve` process per tree, so that no case pays for starting Python and torch (~5 s each, most of
a case's time). Prints the Markdown table gpu-ab writes to ab.txt: per case each tree's medians
"round 1 / round 2 / ..", each tree's mean over A's, A's spread ((max - min) / mean of its
rounds), each tree's range of per-round ratios to A ("B / A by round": the ratio within each
round, whose trees ran minutes apart at most, lowest-highest) and the ratio of each tree's median
round to A's ("B / A by medians": one slow round moves the mean, not the median). A ratio whose
distance from 1 is inside A's spread may still be an effect if every round's ratio lies on the
same side of 1: a drift of the machine between rounds moves both trees of a round alike.

  scripts/ab_cases.py [--rounds N] [--timing queued|single] --timeout SECONDS TREE_A TREE_B [TREE...] -- "CASE" ...

--timing (default queued) is passed to each case that does not set its own: profile_case.py then
times samples of calls issued back to back (about 20 ms each), not single calls from an idle GPU,
whose spread hid 3 % effects at 0.2 ms cases (forward_sm90.md, twenty-sixth session).

A CASE is profile_case.py's arguments, optionally led by NAME=value environment settings. A case
that fails or outruns the timeout reads "?" (the tree's process is then restarted for the next
case)."""
import argparse
import os
import queue
import re
import statistics
import subprocess
import sys
import threading
import time

LABELS = "ABCDEFGH"


# The harness is this checkout's bench/profile_case.py for every tree (trees cut from older
# revisions may lack --serve); only the module under test comes from the tree.
HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "profile_case.py")


class Server:
    """profile_case.py --serve for one tree (its build-ab/python on PYTHONPATH). A thread moves
    its output lines into a queue, so that waiting for a result can time out."""

    def __init__(self, tree, harness=HARNESS):
        self.tree = tree
        self.harness = harness
        self.proc = None
        self.lines = None

    def start(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(self.tree, "build-ab", "python"))
        self.proc = subprocess.Popen([sys.executable, self.harness, "--serve"], cwd=self.tree, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lines = queue.Queue()

        def pump(out=self.proc.stdout, lines=self.lines):
            for line in out:
                lines.put(line)
            lines.put(None)  # the process ended

        threading.Thread(target=pump, daemon=True).start()

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass  # left to the OS: the next start() makes a new process and queue
            self.proc = None

    def run(self, case, timeout, fresh=False):
        """The case's median in ms, or None (error, exit or timeout). fresh: in a new process
        (settings a warm process has already read once, e.g. CUDA_* or PYTORCH_*)."""
        if fresh:
            self.stop()
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write(case + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.stop()
            return None
        # The first call of a process also imports torch and tessera: inside the same timeout.
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()  # a hung case must not hold the others
                return None
            if line is None:
                self.stop()
                return None
            if "median" in line or line.startswith("error"):
                break
        m = re.search(r"median ([0-9.]+) ms", line)
        # A failed case may have left the process's CUDA context broken (an illegal address is
        # sticky): the tree's next case gets a new process, as the old one-process-per-case loop
        # gave every case. Bad arguments break nothing.
        if (m is None and not line.startswith("error: bad case arguments")) or fresh:
            self.stop()
        return float(m.group(1)) if m else None


def needs_fresh_process(case):
    """Whether a case sets anything but TESSERA_* variables (read at each call by the library):
    torch's and CUDA's are read once per process."""
    settings = []
    for w in case.split():
        name = w.split("=", 1)[0]
        if "=" not in w or not name.isidentifier():
            break
        settings.append(name)
    return any(not n.startswith("TESSERA_") for n in settings)


def with_timing(case, timing):
    """The case as served: profile_case.py's --timing added unless the case sets it."""
    return case if timing is None or "--timing" in case.split() else f"{case} --timing {timing}"


def table(cases, trees, timeout, harness=HARNESS, rounds=2, timing=None):
    servers = [Server(t, harness) for t in trees]
    n = len(trees)
    head = "| case |" + "".join(f" {LABELS[i]} ms |" for i in range(n)) + "".join(
        f" {LABELS[i]} / A |" for i in range(1, n)) + " A spread |" + "".join(
        f" {LABELS[i]} / A by round |" for i in range(1, n)) + "".join(
        f" {LABELS[i]} / A by medians |" for i in range(1, n))
    print(head)
    print("|---|" + "---|" * (4 * n - 2))
    try:
        for case in cases:
            times = [[None] * rounds for _ in range(n)]
            fresh = needs_fresh_process(case)
            for rnd in range(rounds):
                # Round r starts at tree r mod n (A B C, B C A, C A B, ..): a drift of the machine
                # within a round (clocks falling as it warms) then falls on every tree alike
                # over the rounds instead of always favouring A.
                for k in range(n):
                    i = (rnd + k) % n
                    times[i][rnd] = servers[i].run(with_timing(case, timing), timeout, fresh)

            def mean(i):
                v = times[i]
                return sum(v) / len(v) if None not in v else None

            cells = [" / ".join("?" if x is None else f"{x:.3f}" for x in times[i]) for i in range(n)]
            ratios = [f"{mean(i) / mean(0):.3f}" if mean(i) and mean(0) else "n/a" for i in range(1, n)]
            spread = f"{(max(times[0]) - min(times[0])) / mean(0):.3f}" if mean(0) else "n/a"

            def by_round(i):
                r = [times[i][k] / times[0][k] for k in range(rounds) if times[i][k] and times[0][k]]
                return f"{min(r):.3f}-{max(r):.3f}" if r else "n/a"

            def median(i):
                v = times[i]
                return statistics.median(v) if None not in v else None

            paired = [by_round(i) for i in range(1, n)]
            medians = [f"{median(i) / median(0):.3f}" if median(i) and median(0) else "n/a" for i in range(1, n)]
            print("| " + case + " | " + " | ".join(cells + ratios + [spread] + paired + medians) + " |", flush=True)
    finally:
        for s in servers:
            s.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case and tree (default 60)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per case, 1 to 20 (default 2)")
    ap.add_argument("--timing", choices=["queued", "single", "none"], default="queued",
                    help="profile_case.py's --timing for cases without their own (default queued; none: pass nothing)")
    ap.add_argument("--harness", default=HARNESS, help="the profile_case.py to serve (default: this checkout's)")
    ap.add_argument("trees", nargs="+", help="source trees with build-ab/python, then -- and the cases")
    argv = sys.argv[1:]
    if "--" not in argv:
        ap.error("expected the trees, then --, then the cases")
    k = argv.index("--")
    a = ap.parse_args(argv[:k])
    cases = argv[k + 1:]
    if len(a.trees) < 1 or len(a.trees) > len(LABELS):
        ap.error(f"trees: 1 to {len(LABELS)} expected, got {len(a.trees)}")
    if not cases:
        ap.error("cases: at least one expected after --")
    for c in cases:
        if not c.strip() or "\n" in c or "\r" in c or "--serve" in c.split():
            ap.error(f"cases: each one line of profile_case.py arguments (not empty, no --serve), got {c!r}")
    if a.timeout <= 0:
        ap.error(f"--timeout: a positive number of seconds expected, got {a.timeout}")
    if not 1 <= a.rounds <= 20:
        ap.error(f"--rounds: 1 to 20 expected, got {a.rounds}")
    table(cases, [os.path.abspath(t) for t in a.trees], a.timeout, os.path.abspath(a.harness), a.rounds,
          None if a.timing == "none" else a.timing)


if __name__ == "__main__":
    main()
