"""Fuzz cases run in worker subprocesses, so that a case that crashes the process (a segfault
in compiled code, an abort in a native library) or never ends is found, named and survived.

    with Pool(jobs=2, timeout=30) as pool:
        for key, outcome in pool.run([(key, text, seed), ...]):
            ...          # a key comes again when a later crash shows the case corrupted memory

Each worker (`python -m hlo_opt.tools.fuzz_pool MEMORY`) is long-lived: it reads one case a
line (JSON) on stdin and answers with its Outcome, a line on its own copy of stdout (what the
code under test prints goes to its stderr, a log file). A worker whose pipe closes mid-case
crashed: the case is recorded as `crash` with the signal, the stage it had reached and the
log's tail (faulthandler's Python stack among it); one past the per-case time limit is
killed and the case recorded as `timeout`. Either way a fresh worker takes its place, as it
does after every `cases_per_worker` cases to bound what the JIT's code cache holds.

Code that writes out of bounds corrupts the heap silently; glibc notices later, when memory
near it is freed. So workers run with glibc's checking malloc where there is one, a worker
frees what a case held before it answers (stage `cleanup`),
a worker's exit status counts for its last case (stage `exit`), and every crash is run again
alone in a fresh worker: the report says whether it crashes again or was the victim of an
earlier case. A worker's address space is capped (RLIMIT_AS), so an absurd allocation is a
MemoryError, not the machine's OOM.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .fuzz_case import Outcome

LOG_TAIL_LINES = 40
STAGE_MARK = "fuzz-stage:"                 # a worker's log line as each stage begins
# glibc's checking malloc: a guard byte past every block, checked when the block is freed,
# and freed memory filled with a pattern.
MALLOC_DEBUG = ctypes.util.find_library("c_malloc_debug")


@dataclass
class _Worker:
    proc: subprocess.Popen
    log: object                      # the worker's stderr, a temporary file
    cases: int = 0
    case: tuple | None = None        # the case in flight: (key, text, seed)
    history: list = field(default_factory=list)   # the cases it ran before
    log_start: int = 0
    deadline: float = 0.0


class Pool:
    def __init__(self, jobs: int = 2, timeout: float = 30.0, memory_bytes: int = 4 << 30,
                 cases_per_worker: int = 50):
        self.jobs, self.timeout = jobs, timeout
        self.memory_bytes, self.cases_per_worker = memory_bytes, cases_per_worker
        self._workers: list[_Worker | None] = [None] * jobs
        self._earlier: dict = {}             # crashed case's key -> its worker's earlier cases
        self._selector = selectors.DefaultSelector()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for k, w in enumerate(self._workers):
            if w is not None:
                self._stop(k, kill=w.case is not None)

    def run(self, cases):
        """Yield (key, Outcome) for every (key, text, seed) of `cases`, in completion order;
        crashes last, once run again alone. A crash that does not happen again alone sends
        the earlier cases of its worker to be run alone too: one that then crashes (it
        corrupted memory that a later case tripped over) is yielded again, as a crash."""
        crashed = {}
        for key, case, outcome in self._run(cases):
            if outcome.kind == "crash" and self.cases_per_worker > 1:
                crashed[key] = (case, outcome)
            else:
                yield key, outcome
        if not crashed:
            return
        again = self._alone(case for case, _ in crashed.values())
        suspects = {c[0]: c for key in crashed if again[key].kind != "crash"
                    for c in self._earlier.get(key, ())}
        culprits = {k: o for k, o in self._alone(suspects.values()).items()
                    if o.kind == "crash"}
        for key, (case, first) in crashed.items():
            explained = any(c[0] in culprits for c in self._earlier.get(key, ()))
            yield key, _confirmed(first, again[key], explained)
        for key, outcome in culprits.items():
            outcome.detail += (" (alone; found among the earlier cases of a worker that "
                               "crashed on a case that does not crash alone)")
            yield key, outcome

    def _alone(self, cases) -> dict:
        """key -> Outcome of each case run in a worker of its own."""
        with Pool(self.jobs, self.timeout, self.memory_bytes, cases_per_worker=1) as pool:
            return {key: outcome for key, _, outcome in pool._run(cases)}

    def _run(self, cases):
        """(key, case, Outcome) for every case, in completion order."""
        pending = iter(cases)
        exhausted = False
        while True:
            for k in range(self.jobs):
                if not exhausted and (self._workers[k] is None or self._workers[k].case is None):
                    case = next(pending, None)
                    if case is None:
                        exhausted = True
                    else:
                        self._send(k, case)
            busy = [k for k, w in enumerate(self._workers) if w is not None and w.case is not None]
            if not busy:
                return
            wait = min(self._workers[k].deadline for k in busy) - time.perf_counter()
            for ready, _ in self._selector.select(max(0.0, wait)):
                yield self._receive(ready.data)
            now = time.perf_counter()
            for k in busy:
                w = self._workers[k]
                if w is not None and w.case is not None and now > w.deadline:
                    yield self._fail(k, Outcome("timeout", "", detail=f"no answer within "
                                                f"{self.timeout:g} s"), kill=True)

    def _send(self, k: int, case) -> None:
        w = self._workers[k]
        if w is None:
            w = self._workers[k] = self._start(k)
        w.log.flush()
        w.case, w.log_start, w.cases = case, w.log.seek(0, os.SEEK_END), w.cases + 1
        w.deadline = time.perf_counter() + self.timeout
        _key, text, seed = case
        try:
            w.proc.stdin.write(json.dumps({"text": text, "seed": seed}) + "\n")
            w.proc.stdin.flush()
        except BrokenPipeError:
            pass                                  # its death shows as end of file

    def _start(self, k: int) -> _Worker:
        log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        env = dict(os.environ, HLO_OPT_COMPILE_WORKERS="0", PYTHONFAULTHANDLER="1")
        if MALLOC_DEBUG:
            env.update(LD_PRELOAD=" ".join(filter(None, (MALLOC_DEBUG, env.get("LD_PRELOAD")))),
                       MALLOC_CHECK_="3", MALLOC_PERTURB_="165")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hlo_opt.tools.fuzz_pool", str(self.memory_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        self._selector.register(proc.stdout, selectors.EVENT_READ, k)
        return _Worker(proc, log)

    def _stop(self, k: int, kill: bool = False) -> int:
        """End worker k (asking it to exit, or killing it); its exit status."""
        w = self._workers[k]
        self._selector.unregister(w.proc.stdout)
        if kill:
            w.proc.kill()
        try:
            w.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            status = w.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            status = w.proc.wait()
        w.proc.stdout.close()
        w.log.close()
        self._workers[k] = None
        return status

    def _receive(self, k: int):
        w = self._workers[k]
        line = w.proc.stdout.readline()
        if not line:
            return self._fail(k, Outcome("crash", "", detail=_death(w.proc.wait())))
        outcome = Outcome(**json.loads(line))
        if w.cases < self.cases_per_worker:
            case, w.case = w.case, None
            w.history.append(case)
            return case[0], case, outcome
        # Its last case: the worker exits, freeing all it holds; memory the case corrupted
        # shows now or never.
        w.proc.stdin.close()
        try:
            status = w.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            status = w.proc.wait()
        if status:
            return self._fail(k, Outcome("crash", "exit", detail=_death(status)))
        case = w.case
        self._stop(k)
        return case[0], case, outcome

    def _fail(self, k: int, outcome: Outcome, kill: bool = False):
        """The case in flight on worker k, failed with the log's tail (the stage it had
        reached, the Python stack faulthandler wrote); the worker is ended."""
        w = self._workers[k]
        w.log.flush()
        w.log.seek(w.log_start)
        lines = w.log.read().splitlines()
        marks = [line.split()[1:3] for line in lines if line.startswith(STAGE_MARK)]
        if marks:                   # "fuzz-stage: optimize True", other output may follow
            stage, verified = (marks[-1] + ["", ""])[:2]
            outcome.stage = outcome.stage or stage
            outcome.verified = {"True": True, "False": False}.get(verified)
        log = [line for line in lines if not line.startswith(STAGE_MARK)]
        outcome.trace = "\n".join(log[-LOG_TAIL_LINES:])
        case = w.case
        if outcome.kind == "crash":
            self._earlier[case[0]] = w.history
        self._stop(k, kill=kill)
        return case[0], case, outcome


def _death(status: int) -> str:
    how = f"killed by {signal.Signals(-status).name}" if status < 0 else \
        f"exited with status {status}"
    return f"the worker {how}"


def _confirmed(first: Outcome, alone: Outcome, explained: bool) -> Outcome:
    """A crash, once the case was run again alone in a fresh worker: a crash again; or
    the case's own outcome when an earlier case of its worker was found to crash alone;
    or, with neither, the crash marked as not reproduced."""
    if alone.kind == "crash":
        alone.detail += " (again when run alone)"
        return alone
    if explained:
        alone.detail += (f" (its worker crashed here: {first.detail}, after an earlier case "
                         "that crashes alone)")
        return alone
    first.where = "not reproduced alone"
    first.detail += (f" (alone in a fresh worker it ends {alone.kind} at {alone.stage}; "
                     "no earlier case of its worker crashes alone)")
    return first


def serve(memory_bytes: int) -> None:
    """The worker loop: cases in on stdin, outcomes out on a private copy of stdout."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)                                 # stray prints go to the log
    from .fuzz_case import run_case
    libc = ctypes.CDLL(ctypes.util.find_library("c")) if ctypes.util.find_library("c") else None

    def progress(stage: str, verified) -> None:
        print(f"{STAGE_MARK} {stage} {verified}", file=sys.stderr, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        outcome = run_case(request["text"], request["seed"], progress)
        # Free what the case held now, so that memory it corrupted shows in this case.
        progress("cleanup", outcome.verified)
        gc.collect()
        if libc is not None:
            libc.malloc_trim(0)
        answers.write(json.dumps(outcome.to_dict()) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
