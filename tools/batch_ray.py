"""`hlo-opt batch --ray [ADDRESS]`: the same jobs as Ray tasks (batch_work.run_job), on a
local Ray instance (started, or the one this process or `ray start` already runs) or on
the cluster at ADDRESS. Ray schedules them; we only keep as many in flight as there are
CPUs to run them (Ray's pattern for bounding pending tasks), so that a task's time is
counted from about when it starts, and cancel (force: the worker is killed) one that runs
past the time limit. A task whose worker dies fails alone, with Ray's error."""
from __future__ import annotations

import time

from ..errors import HloError
from .batch_work import CRASHED, TIMEOUT, Job, row, run_job

POLL_SECONDS = 0.2


def import_ray():
    try:
        import ray
    except ImportError:
        raise HloError("--ray needs Ray: pip install 'hlo-opt[ray]' (or pip install ray)") \
            from None
    return ray


def ray_results(jobs: list[Job], address: str | None, parallel: int | None, timeout: float):
    """Yield a report row per job, in completion order; closing the generator cancels the
    tasks still running. Ray is shut down at the end when this call started it."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address or None, log_to_driver=False)
    task = ray.remote(num_cpus=1, max_retries=0)(run_job)
    parallel = parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
    pending = list(jobs)
    inflight: dict = {}                              # ObjectRef -> (job, submitted at)
    cancelled: set = set()
    try:
        while pending or inflight:
            while pending and len(inflight) < parallel:
                job = pending.pop(0)
                inflight[task.remote(job)] = (job, time.perf_counter())
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=POLL_SECONDS)
            for ref in done:
                job, start = inflight.pop(ref)
                yield _outcome(ray, ref, job, ref in cancelled, timeout, start)
            for ref, (job, start) in inflight.items():
                if ref not in cancelled and time.perf_counter() - start > timeout:
                    cancelled.add(ref)
                    ray.cancel(ref, force=True)
    finally:
        for ref in inflight:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _outcome(ray, ref, job: Job, cancelled: bool, timeout: float, start: float) -> dict:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as e:
        if cancelled:
            return row(job, TIMEOUT, f"{job.input}: no result within {timeout:g} s; its "
                                     "task was cancelled", seconds=timeout)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return row(job, CRASHED, f"{job.input}: the Ray task failed ({first})",
                   seconds=time.perf_counter() - start)
