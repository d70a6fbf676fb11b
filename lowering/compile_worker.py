"""Compile workers: LLVM IR text in, optimized machine code for this host out.

Kernels are independent LLVM modules, so a module with many new kernels compiles them in
parallel: `Workers` keeps one `python -m hlo_opt.lowering.compile_worker` subprocess per
core and a feeding thread for each (the LLVM calls release the GIL). Subprocesses rather
than multiprocessing: those would re-import the user's main script in every worker.

Protocol on the worker's stdin/stdout: requests are (level: u32, length: u64, IR texts
joined by NUL), replies (length: u64, object code) or length 2**64-1 followed by an error
message.
"""
from __future__ import annotations

import os
import queue
import struct
import subprocess
import sys
import threading

from .jit import WorkerCrashed

_ERROR = (1 << 64) - 1


def _read_exact(stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def serve() -> None:
    """The worker loop (runs in the subprocess)."""
    from . import jit
    jit.target_machine()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            level, length = struct.unpack("<IQ", _read_exact(stdin, 12))
        except EOFError:
            return
        texts = _read_exact(stdin, length).decode().split("\0")
        try:
            reply = jit._object_code(texts, level)
            stdout.write(struct.pack("<Q", len(reply)) + reply)
        except Exception as e:                      # report, keep serving
            message = f"{type(e).__name__}: {e}".encode()
            stdout.write(struct.pack("<Q", _ERROR) + struct.pack("<Q", len(message)) + message)
        stdout.flush()


class Workers:
    """A pool of compile subprocesses; `map(chunks, level)` returns one object per chunk
    of IR texts."""

    def __init__(self, n: int):
        self.pid = os.getpid()
        self.procs = [_start() for _ in range(n)]
        self.lock = threading.Lock()

    def _replace_exited(self) -> None:
        """A worker LLVM killed is replaced: with none left, compiling would fall back to
        this process, where the next such abort would end it."""
        for k, p in enumerate(self.procs):
            if p.poll() is not None:
                _close(p)
                self.procs[k] = _start()

    def _run(self, proc, tasks: queue.Queue, results: dict, level: int) -> None:
        while True:
            try:
                k, texts = tasks.get_nowait()
            except queue.Empty:
                return
            try:
                data = "\0".join(texts).encode()
                proc.stdin.write(struct.pack("<IQ", level, len(data)) + data)
                proc.stdin.flush()
                (length,) = struct.unpack("<Q", _read_exact(proc.stdout, 8))
                if length == _ERROR:
                    (n,) = struct.unpack("<Q", _read_exact(proc.stdout, 8))
                    results[k] = RuntimeError(_read_exact(proc.stdout, n).decode())
                else:
                    results[k] = _read_exact(proc.stdout, length)
            except (OSError, EOFError):
                results[k] = WorkerCrashed("a compile worker exited while compiling kernels "
                                           "(LLVM's message, if any, is on stderr)")
                _close(proc)            # it is dying: reaped, so it is replaced below
                return

    def map(self, chunks: list[list[str]], level: int) -> list[bytes]:
        with self.lock:
            self._replace_exited()
            tasks: queue.Queue = queue.Queue()
            for k, t in enumerate(chunks):
                tasks.put((k, t))
            results: dict = {}
            threads = [threading.Thread(target=self._run, args=(p, tasks, results, level))
                       for p in self.procs if p.poll() is None]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self._replace_exited()
        out = []
        for k in range(len(chunks)):
            r = results.get(k, RuntimeError("no compile worker left"))
            if isinstance(r, Exception):
                raise r
            out.append(r)
        return out

    def close(self) -> None:
        for p in self.procs:
            _close(p)


def _start() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hlo_opt.lowering.compile_worker"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _close(p: subprocess.Popen) -> None:
    """End a worker and close both its pipes (an exited worker's too: an unclosed pipe is a
    ResourceWarning at exit)."""
    try:
        p.stdin.close()
        p.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        p.kill()
        p.wait()
    p.stdout.close()


if __name__ == "__main__":
    serve()
