"""Seconds from a fresh clone to the login page answering, as a newcomer runs `make run`.

    .venv/bin/python bench/first_start.py [--runs 3] [--repo .] [--keep]

Each run clones the repository's committed HEAD (`git clone`, so uncommitted edits are
not measured) into a new temporary folder, starts `make run` there on a free local port
with none of this shell's VAR_DIR / DATABASE_URL / MEMORY_ROOT, and polls
`GET /login/` every 0.1 s until it answers 200. It prints the seconds, and when each
step of `make run` started (from the lines make prints), then stops the server (SIGINT,
as Ctrl-C) and deletes the folder. The package caches of the machine (pip's, uv's) are
used as they are: a newcomer's second project finds them warm too; `--cold` points the
installer at empty caches instead (network bound: it measures the package registry).

On a shared machine the figure moves with what else runs: run it several times and
read the spread. The CPU seconds `make run`'s processes used until the page answered
(read from /proc) move much less: on an idle 2-core machine the wall time cannot be
below about half of them, and is close to them when the steps run one after another.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.serving import HOST, free_port  # noqa: E402

# The lines of `make run` that mark a step, in the order they appear, and the step's name.
MARKS = [
    ("-m venv", "create the virtualenv"),
    ("pip install", "install packages"),
    ("uv pip", "install packages"),
    ("manage.py migrate", "migrate"),
    ("manage.py bootstrap", "roles, admin, demo data"),
    ("Dashboard: http", "start the server"),
]


def answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=60)  # a browser waits too
        conn.request("GET", "/login/")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


TICK = os.sysconf("SC_CLK_TCK")


def group_cpu(group: int) -> float:
    """CPU seconds used so far by the processes of one process group: each live one's own
    and that of its children it has waited for (so finished steps count once)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == group:  # pgrp
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / TICK


def one_run(repo: Path, keep: bool, cold: bool, timeout: float) -> tuple[float, float, list[tuple[float, str]]]:
    folder = Path(tempfile.mkdtemp(prefix="first-start-"))
    clone = folder / "clone"
    subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in {"VAR_DIR", "DATABASE_URL", "MEMORY_ROOT", "VIRTUAL_ENV"}}
    port = free_port()
    env["PORT"] = str(port)
    if cold:
        env["PIP_CACHE_DIR"] = str(folder / "pip-cache")
        env["UV_CACHE_DIR"] = str(folder / "uv-cache")
    lines: list[tuple[float, str]] = []
    started = time.monotonic()
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped together below
        text=True,
    )

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - started, line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    cpu = 0.0
    try:
        while not answers(port):
            cpu = max(cpu, group_cpu(proc.pid))
            if proc.poll() is not None:
                tail = "\n".join(text for _, text in lines[-20:])
                raise SystemExit(f"make run exited with {proc.returncode} before the login page answered:\n{tail}")
            if time.monotonic() - started > timeout:
                raise SystemExit(f"the login page did not answer within {timeout:.0f} s")
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        cpu = max(cpu, group_cpu(proc.pid))
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            log = folder / "make-run.log"
            log.write_text("".join(f"{at:7.2f}  {text}\n" for at, text in lines))
            print(f"kept {folder} (make run's output with its times: {log})")
    steps: list[tuple[float, str]] = []
    for at, text in lines:
        for needle, name in MARKS:
            if needle in text and (not steps or steps[-1][1] != name):
                steps.append((at, name))
                break
    return elapsed, cpu, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repo", type=Path, default=BASE_DIR, help="the repository to clone (default: this one)")
    parser.add_argument("--keep", action="store_true", help="keep the clone (and its make run output) afterwards")
    parser.add_argument("--cold", action="store_true", help="empty package caches (measures the registry)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"first start of {head} on {os.cpu_count()} cores, {args.runs} run(s){' (cold caches)' if args.cold else ''}")
    seconds, cpus = [], []
    for n in range(1, args.runs + 1):
        load = os.getloadavg()[0]
        elapsed, cpu, steps = one_run(args.repo, args.keep, args.cold, args.timeout)
        seconds.append(elapsed)
        cpus.append(cpu)
        marks = ", ".join(f"{name} at {at:.1f}" for at, name in steps)
        print(
            f"run {n}: login page answered after {elapsed:.1f} s, {cpu:.1f} CPU-s (load {load:.1f} before; {marks})",
            flush=True,
        )
    if len(seconds) > 1:
        print(
            f"min {min(seconds):.1f} s · median {statistics.median(seconds):.1f} s · max {max(seconds):.1f} s "
            f"over {len(seconds)} runs; CPU {min(cpus):.1f}–{max(cpus):.1f} s"
        )
    # The load during the runs: another process's work shows up here, not in the code.
    print(f"load average afterwards: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
