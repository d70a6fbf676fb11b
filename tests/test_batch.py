"""`hlo-opt batch`: a folder laid out as XLA dumps it (corpus fixtures under dump names, a
broken module, files that are not modules) in, optimized outputs, a summary table and a JSON
report out; one bad module never stops the batch; a re-run skips what is up to date unless
the options changed; a module past the time limit or whose worker dies is reported and the
batch goes on; Ctrl-C keeps what finished; Ray gives what the process pool gives."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

import hlo_opt
from conftest import CORPUS
from hlo_opt.kernels import kernel_report
from hlo_opt.tools.batch_work import operation_count

GOOD = {"module_0001.jit_rmsnorm": "rmsnorm.hlo", "module_0002.jit_softmax": "softmax.hlo",
        "module_0003.jit_layernorm": "layernorm.hlo"}
BROKEN = "module_0004.jit_broken"
BROKEN_TEXT = """HloModule broken

ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] frobnicate(p)
}
"""
# Add, commutative and associative: 16 summands give an e-graph that grows until the node
# limit, seconds at least; with --node-limit raised, until --time-limit.
EXPLODING_RULES = """ruleset simplify
rule add_comm [strict]: add(x, y) => add(y, x)
rule add_assoc [strict]: add(add(x, y), z) => add(x, add(y, z))
"""
TINY = "HloModule tiny\n\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] add(p, p)\n}\n"


def sum_module(n: int = 16) -> str:
    params = [f"  p{i} = f32[8] parameter({i})" for i in range(n)]
    sums = [f"  s{i} = f32[8] add({'p0' if i == 1 else f's{i - 1}'}, p{i})" for i in range(1, n)]
    return "\n".join(["HloModule sum", "", "ENTRY e {", *params, *sums,
                      f"  ROOT r = f32[8] negate(s{n - 1})", "}", ""])


@pytest.fixture
def dump(tmp_path):
    """A dump folder: three corpus modules and a broken one as XLA names them, beside
    XLA's other outputs (a valid optimized module, LLVM IR) that are not inputs."""
    folder = tmp_path / "dump"
    folder.mkdir()
    for name, fixture in GOOD.items():
        shutil.copy(CORPUS / fixture, folder / f"{name}.before_optimizations.txt")
    (folder / f"{BROKEN}.before_optimizations.txt").write_text(BROKEN_TEXT)
    shutil.copy(CORPUS / "rmsnorm.xla_opt.hlo",
                folder / "module_0001.jit_rmsnorm.cpu_after_optimizations.txt")
    (folder / "module_0001.jit_rmsnorm.ir-no-opt.ll").write_text("define void @f() {\n")
    return folder


def batch(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hlo_opt.tools.hlo_opt_cli", "batch",
                           *map(str, args)], capture_output=True, text=True, timeout=timeout)


def report(out) -> dict:
    return json.loads((out / "report.json").read_text())


def statuses(out) -> dict:
    return {m["name"]: m["status"] for m in report(out)["modules"]}


def test_dump_folder_outputs_table_and_report(dump, tmp_path):
    out = tmp_path / "out"
    result = batch(dump, "-j", 2, "--out", out)
    assert result.returncode == 1, result.stderr           # one module failed
    assert "Traceback" not in result.stderr
    assert sorted(os.listdir(out)) == sorted(
        [f"{n}.hlo" for n in GOOD] + ["report.json", ".hlo-opt-batch.json"])   # no temp files
    rep = report(out)
    assert rep["counts"] == {"ok": 3, "error": 1}
    assert rep["backend"] == "pool" and rep["options"]["rules"] == ["default"]
    rows = {m["name"]: m for m in rep["modules"]}
    assert list(rows) == [*GOOD, BROKEN]                   # input order; XLA's outputs unread
    broken = rows[BROKEN]
    assert broken["output"] is None or not os.path.exists(broken["output"])
    assert re.fullmatch(rf".*{BROKEN}\.before_optimizations\.txt:5:19: unknown opcode "
                        r"'frobnicate'.*", broken["error"])
    for name, fixture in GOOD.items():
        text = (out / f"{name}.hlo").read_text()
        module = hlo_opt.parse((CORPUS / fixture).read_text())
        expected = hlo_opt.optimize(module)
        assert text == expected.to_text()
        row = rows[name]
        assert (row["instructions_before"], row["instructions_after"]) == \
            (operation_count(module), operation_count(expected))
        assert row["kernels"] >= 1 and row["seconds"] > 0 and row["error"] is None
    # XLA's optimized module beside an input is counted as ours are; only rmsnorm has one
    xla_rmsnorm = kernel_report(hlo_opt.parse((CORPUS / "rmsnorm.xla_opt.hlo").read_text()))
    assert {n: r["xla_kernels"] for n, r in rows.items()} == {
        **{n: None for n in rows}, "module_0001.jit_rmsnorm": xla_rmsnorm.kernels}
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["module", "instructions", "kernels", "XLA", "kernels", "time",
                                "status"]
    softmax, rmsnorm = rows["module_0002.jit_softmax"], rows["module_0001.jit_rmsnorm"]
    assert re.search(rf"module_0002\.jit_softmax\s+{softmax['instructions_before']} → "
                     rf"{softmax['instructions_after']}\s+{softmax['kernels']}\s+-\s+[\d.]+ s"
                     r"\s+ok$", result.stdout, re.M)
    assert re.search(rf"module_0001\.jit_rmsnorm\s+\d+ → \d+\s+{rmsnorm['kernels']}\s+"
                     rf"{xla_rmsnorm.kernels}\s+[\d.]+ s\s+ok$", result.stdout, re.M)
    assert f"error: {broken['error']}" in result.stdout
    assert lines[-2] == "4 modules: 3 ok, 1 error"
    assert lines[-1] == f"kernels where XLA's optimized module is beside the input (1 module): " \
                        f"ours {rmsnorm['kernels']}, XLA {xla_rmsnorm.kernels}"


def test_rerun_skips_up_to_date_outputs_until_options_or_input_change(dump, tmp_path):
    out = tmp_path / "out"
    batch(dump, "--out", out, "-j", 2)
    outputs = {n: (out / f"{n}.hlo").stat().st_mtime_ns for n in GOOD}
    again = batch(dump, "--out", out, "-j", 2)
    assert again.returncode == 1
    assert statuses(out) == {**{n: "skipped" for n in GOOD}, BROKEN: "error"}
    assert {n: (out / f"{n}.hlo").stat().st_mtime_ns for n in GOOD} == outputs
    assert again.stdout.splitlines()[-2] == "4 modules: 3 skipped, 1 error"
    # An input newer than its output is optimized again, the others stay skipped.
    softmax = dump / "module_0002.jit_softmax.before_optimizations.txt"
    later = (out / "module_0002.jit_softmax.hlo").stat().st_mtime_ns + 10**9
    os.utime(softmax, ns=(later, later))
    batch(dump, "--out", out, "-j", 2)
    assert statuses(out)["module_0002.jit_softmax"] == "ok"
    assert statuses(out)["module_0001.jit_rmsnorm"] == "skipped"
    # Other options: every module again, with outputs as those options make them.
    (dump / f"{BROKEN}.before_optimizations.txt").unlink()
    changed = batch(dump, "--out", out, "-j", 2, "--rules", "none", "--no-fusion")
    assert changed.returncode == 0, changed.stdout
    assert set(statuses(out).values()) == {"ok"}
    assert report(out)["options"]["rules"] == ["none"]
    rms = hlo_opt.parse((CORPUS / GOOD["module_0001.jit_rmsnorm"]).read_text())
    assert (out / "module_0001.jit_rmsnorm.hlo").read_text() == \
        hlo_opt.optimize(rms, "none", fusion=False).to_text()


def test_inputs_files_globs_and_plain_folders(tmp_path):
    """Outside a dump folder, a folder's *.hlo are its modules; quoted globs are expanded;
    two inputs with one name get distinct outputs; no module at all is a usage error."""
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "tiny.hlo").write_text(TINY)
        (tmp_path / sub / "notes.txt").write_text("not a module\n")
    out = tmp_path / "out"
    result = batch(tmp_path / "a", str(tmp_path / "*" / "tiny.hlo"), "--out", out, "-j", 1)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = report(out)["modules"]
    assert [m["input"] for m in rows] == [str(tmp_path / s / "tiny.hlo") for s in ("a", "b")]
    names = [m["name"] for m in rows]
    assert len(set(names)) == 2 and all(re.fullmatch(r"tiny-[0-9a-f]{8}", n) for n in names)
    assert sorted(os.listdir(out)) == sorted([f"{n}.hlo" for n in names] +
                                             ["report.json", ".hlo-opt-batch.json"])
    for inputs, outdir in ((tmp_path / "none", "x"), (tmp_path / "*.nothing", "x"),
                           (out, out)):                 # outputs are never inputs
        bad = batch(inputs, "--out", tmp_path / outdir)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr



def test_broken_rule_file_is_one_usage_error_before_any_module_runs(tmp_path):
    (tmp_path / "tiny.hlo").write_text(TINY)
    rules = tmp_path / "broken.rules"
    rules.write_text("rule broken: add(x, \n")
    result = batch(tmp_path / "tiny.hlo", "--out", tmp_path / "out", "--rules", rules)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert re.fullmatch(rf"{re.escape(str(rules))}:1:\d+: .+", result.stderr.strip())
    assert not (tmp_path / "out" / "tiny.hlo").exists()

@pytest.fixture
def slow(tmp_path):
    """The exploding sum (runs until killed with --node-limit raised) and a tiny module."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "ac.rules").write_text(EXPLODING_RULES)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a_tiny.hlo").write_text(TINY)
    (folder / "b_sum.hlo").write_text(sum_module())
    return folder, ["--rules", tmp_path / "rules" / "ac.rules", "--node-limit", 10**8]


def test_module_past_the_timeout_is_stopped_and_reported(slow, tmp_path):
    folder, options = slow
    out = tmp_path / "out"
    start = time.perf_counter()
    result = batch(folder, "--out", out, "-j", 2, "--timeout", 3, *options)
    assert time.perf_counter() - start < 30
    assert result.returncode == 1, result.stderr
    assert statuses(out) == {"a_tiny": "ok", "b_sum": "timeout"}
    assert "no result within 3 s" in report(out)["modules"][1]["error"]
    assert sorted(os.listdir(out)) == [".hlo-opt-batch.json", "a_tiny.hlo", "report.json"]


def _workers(pid: int) -> list[int]:
    """The pool's workers: the processes the batch process spawned (not its resource
    tracker)."""
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                spawned = b"spawn_main" in f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and spawned:
            out.append(int(entry))
    return out


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _busy_workers(pid: int, count: int) -> list[int]:
    """Once `count` workers have each spent a second of CPU time on their module, those."""
    busy = []
    def found():
        busy[:] = [w for w in _workers(pid) if _cpu_seconds(w) > 1.0]
        return len(busy) >= count
    _wait_for(found)
    return busy


def _wait_for(predicate, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_killed_worker_is_reported_and_the_batch_goes_on(slow, tmp_path):
    folder, options = slow
    (folder / "b_sum.hlo").rename(folder / "0_sum.hlo")         # first, alone (-j 1)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "hlo_opt.tools.hlo_opt_cli", "batch",
                             str(folder), "--out", str(out), "-j", "1",
                             *map(str, options)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        os.kill(_busy_workers(proc.pid, 1)[0], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert statuses(out) == {"0_sum": "crashed", "a_tiny": "ok"}
    assert "worker process died" in report(out)["modules"][0]["error"]
    assert "crashed: " in stdout and "Traceback" not in stderr


def test_worker_killed_beside_another_both_run_again_alone(slow, tmp_path):
    """Which of two running modules killed the worker is not known: each runs again alone,
    and here (the kill came from outside) both then succeed."""
    folder, options = slow
    (folder / "a_tiny.hlo").write_text(sum_module(15))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "hlo_opt.tools.hlo_opt_cli", "batch",
                             str(folder), "--out", str(out), "-j", "2", *map(str, options[:2])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        os.kill(_busy_workers(proc.pid, 2)[0], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stdout + stderr
    assert statuses(out) == {"a_tiny": "ok", "b_sum": "ok"}


def test_ctrl_c_keeps_finished_outputs_and_writes_the_report(slow, tmp_path):
    folder, options = slow
    out = tmp_path / "out"
    # as from a terminal: a shell's background job (CI run with `&`) inherits SIGINT ignored
    proc = subprocess.Popen([sys.executable, "-m", "hlo_opt.tools.hlo_opt_cli", "batch",
                             str(folder), "--out", str(out), "-j", "1",
                             *map(str, options)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(lambda: (out / "a_tiny.hlo").exists())
        time.sleep(0.5)                                     # the sum is under way
        workers = _workers(proc.pid)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == \
        "hlo-opt batch: interrupted"
    rep = report(out)
    assert rep["interrupted"] is True
    assert statuses(out) == {"a_tiny": "ok", "b_sum": "interrupted"}
    assert "interrupted" in stdout.splitlines()[-1]
    assert sorted(os.listdir(out)) == [".hlo-opt-batch.json", "a_tiny.hlo", "report.json"]
    assert workers
    _wait_for(lambda: all(_state(p) in "ZX" for p in workers), 10)      # no worker left


def test_workers_die_with_a_batch_killed_outright(slow, tmp_path):
    """SIGKILL leaves the batch no chance to stop its workers: the kernel must, or the
    exploding module would be optimized on until memory ran out."""
    folder, options = slow
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "hlo_opt.tools.hlo_opt_cli", "batch",
                             str(folder), "--out", str(out), "-j", "1",
                             *map(str, options)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        workers = _busy_workers(proc.pid, 1)                # the sum is under way
    finally:
        proc.kill()
        proc.wait()
    _wait_for(lambda: all(_state(p) in "ZX" for p in workers), 10)

def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def test_ray_missing_is_a_one_line_usage_error(dump, tmp_path):
    code = ("import sys; sys.modules['ray'] = None; "     # import ray fails as if not installed
            "from hlo_opt.tools.hlo_opt_cli import main; sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, "batch", str(dump), "--out",
                             str(tmp_path / "out"), "--ray"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == \
        "hlo-opt: --ray needs Ray: pip install 'hlo-opt[ray]' (or pip install ray)"
    assert not (tmp_path / "out" / "report.json").exists()


def test_ray_batch_matches_the_process_pool(dump, tmp_path, capsys):
    ray = pytest.importorskip("ray")
    from hlo_opt.tools.hlo_opt_cli import main
    (dump / f"{BROKEN}.before_optimizations.txt").unlink()
    (dump / "module_0003.jit_layernorm.before_optimizations.txt").unlink()
    pool_out, ray_out = tmp_path / "pool", tmp_path / "ray"
    assert batch(dump, "--out", pool_out, "-j", 2).returncode == 0
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main(["batch", str(dump), "--out", str(ray_out), "--ray"]) == 0
    finally:
        ray.shutdown()
    rep = report(ray_out)
    assert rep["backend"] == "ray"
    drop = ("seconds", "output")
    assert [{k: v for k, v in m.items() if k not in drop} for m in rep["modules"]] == \
        [{k: v for k, v in m.items() if k not in drop} for m in report(pool_out)["modules"]]
    for name in list(GOOD)[:2]:
        assert (ray_out / f"{name}.hlo").read_text() == (pool_out / f"{name}.hlo").read_text()
    assert capsys.readouterr().out.splitlines()[-2] == "2 modules: 2 ok"


def test_jax_dump_writes_a_dump_folder_batch_reads_as_it_is(tmp_path):
    pytest.importorskip("jax")
    from hlo_opt.tools.batch_inputs import find_modules
    folder = tmp_path / "dump"
    result = subprocess.run([sys.executable, "-m", "hlo_opt.tools.jax_dump", str(folder),
                             "--model", "softmax"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    written = os.listdir(folder)
    assert any(n.endswith("after_optimizations.txt") for n in written)   # XLA's whole dump
    modules = find_modules([str(folder)], str(tmp_path / "out"))
    assert [os.path.basename(m) for m in modules] == \
        [n for n in written if re.fullmatch(r"module_\d+\.jit_\w+\.before_optimizations\.txt", n)]
    assert len(modules) == 1
    hlo_opt.parse(open(modules[0]).read())
