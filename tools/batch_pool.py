"""`hlo-opt batch` on a local process pool (concurrent.futures.ProcessPoolExecutor).

Workers are long-lived (each compiles the rule set once) and ignore SIGINT: Ctrl-C is the
parent's to handle, which kills them. They are the batch process's own children (spawned),
and on Linux the kernel kills them when it dies, however it dies: a batch killed outright
(SIGKILL leaves it no chance to clean up) never leaves a worker optimizing on, which an
exploding module would do until memory ran out. Each worker tells the parent, through a queue, which
job it starts and its pid, so that the parent can kill exactly the worker whose job runs
past the time limit. A worker that dies (killed, a crash in native code) breaks the
executor: the jobs it did not start go back in the queue, and the jobs that were running
are each run again alone in a fresh pool, so that only the one that kills its worker by
itself is reported as crashed.
"""
from __future__ import annotations

import collections
import ctypes
import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .batch_work import CRASHED, TIMEOUT, Job, row, run_job

POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1          # linux/prctl.h
_started = None          # in a worker: the queue of (job name, pid) messages


def pool_results(jobs: list[Job], workers: int, timeout: float):
    """Yield a report row per job, in completion order. Closing the generator (or an
    exception in it, Ctrl-C) kills the workers; jobs not yet yielded are then unfinished."""
    context = multiprocessing.get_context("spawn")
    started = context.SimpleQueue()       # written before the job runs: never late
    pending = collections.deque((job, False) for job in jobs)     # (job, run it alone)
    while pending:
        run = _Run(context, started, workers, timeout)
        try:
            yield from run.until_broken(pending)
        except BaseException:
            run.stop(kill=True)
            raise
        run.stop(kill=False)


def _init_worker(started, parent: int) -> None:
    global _started
    _die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _started = started
    started.put((None, os.getpid()))


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when `parent`, its parent, dies (Linux's
    PR_SET_PDEATHSIG; elsewhere nothing is done)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0 and os.getppid() != parent:
        os._exit(1)                      # the parent died before the request was made


def _run_in_worker(job: Job) -> dict:
    _started.put((job.name, os.getpid()))
    return run_job(job)


class _Run:
    """One executor's life: until every job is done or a worker dies."""

    def __init__(self, context, started, workers: int, timeout: float):
        self.executor = ProcessPoolExecutor(workers, mp_context=context,
                                            initializer=_init_worker,
                                            initargs=(started, os.getpid()))
        self.started, self.workers, self.timeout = started, workers, timeout
        self.running: dict[str, tuple[int, float]] = {}   # job name -> (pid, start)
        self.pids: set[int] = set()
        self.killed: set[str] = set()

    def until_broken(self, pending: collections.deque):
        inflight: dict = {}                               # future -> (job, alone)
        while pending or inflight:
            while pending and self._may_start(pending[0][1], inflight):
                job, alone = pending.popleft()
                inflight[self.executor.submit(_run_in_worker, job)] = (job, alone)
            done, _ = wait(inflight, POLL_SECONDS, FIRST_COMPLETED)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                done = wait(inflight).done          # the executor fails all it had
            self._note_started()
            lost = []
            for future in done:
                job, alone = inflight.pop(future)
                error = future.exception()
                if isinstance(error, BrokenProcessPool):
                    lost.append((job, alone))
                else:
                    self.running.pop(job.name, None)
                    yield row(job, CRASHED, f"{job.input}: {error!r}") if error else \
                        future.result()
            if lost:
                yield from self._after_break(lost, pending)
                return
            self._kill_overdue()

    def _may_start(self, alone: bool, inflight: dict) -> bool:
        """A job suspected of killing its worker runs with no other beside it."""
        if alone or any(a for _, a in inflight.values()):
            return not inflight
        return len(inflight) < self.workers

    def _after_break(self, lost: list, pending: collections.deque):
        """The jobs a broken executor did not finish: the one we killed is a timeout; one
        that was running is crashed if it ran alone (or no other was running), else
        suspected and run again alone; one that had not started goes back in the queue."""
        running = [job for job, _ in lost if job.name in self.running]
        for job, alone in lost:
            if job.name in self.killed:
                yield row(job, TIMEOUT, f"{job.input}: no result within {self.timeout:g} s; "
                                        "its worker was killed", seconds=self.timeout)
            elif job.name in self.running and (alone or len(running) == 1):
                yield row(job, CRASHED, f"{job.input}: the worker process died while "
                                        "optimizing it", seconds=self._elapsed(job.name))
            else:
                pending.appendleft((job, job.name in self.running))

    def _note_started(self) -> None:
        while not self.started.empty():
            name, pid = self.started.get()
            self.pids.add(pid)
            if name is not None:
                self.running[name] = (pid, time.perf_counter())

    def _elapsed(self, name: str) -> float:
        return time.perf_counter() - self.running[name][1]

    def _kill_overdue(self) -> None:
        for name, (pid, _) in self.running.items():
            if name not in self.killed and self._elapsed(name) > self.timeout:
                self.killed.add(name)
                _kill(pid)

    def stop(self, kill: bool) -> None:
        """Shut the executor down; with `kill` (interrupted) its workers are killed first,
        not waited for."""
        if kill:        # a worker still starting has not told its pid yet: children too
            self._note_started()
            for pid in self.pids | {p.pid for p in multiprocessing.active_children()}:
                _kill(pid)
        self.executor.shutdown(wait=True, cancel_futures=True)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
