"""Real Ray clusters for tests: `ray start` heads and worker nodes, one with a private scratch directory.

Each `ray start --block` runs in its own session (`start_new_session`), and `stop` ends
every process of that session by its session id: Ray's own `ray stop` would end every
Ray process on the machine, other people's included. `RAY_TMPDIR` points each cluster
at its own short temporary folder (Ray's socket paths must stay under 108 bytes), so
its address file never misleads another `ray.init()` on the machine.

A node started with `private_dir` runs in its own mount namespace with a fresh tmpfs
over that directory: it sees an empty folder at the driver's archive path and what it
writes there lands in memory the driver cannot read, like the local disk of a cloud node.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from net_helpers import free_port  # noqa: F401  (re-exported for the Ray tests)

RAY = str(Path(sys.executable).with_name("ray"))



def session_pids(sid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def stop_session(sid: int, *, grace_s: float = 10.0) -> None:
    """SIGTERM every process of session `sid`, then SIGKILL what is left after `grace_s`."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        pids = session_pids(sid)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not session_pids(sid):
            return


class RayStartCluster:
    """`ray start --head` plus worker nodes, as a user would start them (token auth on by default)."""

    def __init__(self, *, head_cpus: int = 0, env: dict | None = None):
        self.tmp = tempfile.mkdtemp(prefix="svr", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "RAY_TMPDIR": self.tmp, **(env or {})}
        self.env.pop("RAY_ADDRESS", None)
        # a fresh shell, as in docs/cluster.md: an earlier in-process `safevla ... --address` may have
        # switched this process to token mode (Ray's helper sets RAY_AUTH_MODE=token in os.environ),
        # and `ray start --head` in token mode neither announces nor behaves like the default
        self.env.pop("RAY_AUTH_MODE", None)
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self._start([RAY, "start", "--head", "--port", str(self.port), "--num-cpus", str(head_cpus)], "head")

    def _start(self, argv: list[str], name: str, *, wrap: list[str] | None = None) -> None:
        log = Path(self.tmp) / f"{name}.log"
        argv = [*argv, *(["--include-dashboard", "false"] if "--head" in argv else []), "--disable-usage-stats",
                "--block"]
        # a wrapper ends in a shell script prefix ("... && exec "): the command completes it
        cmd = argv if not wrap else [*wrap[:-1], wrap[-1] + " ".join(shlex.quote(a) for a in argv)]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.procs.append(proc)
        self.logs.append(log)
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"ray start ({name}) failed:\n{text}")
            time.sleep(0.5)

    def add_node(self, *, num_cpus: int = 1, private_dir: str | os.PathLike | None = None) -> None:
        # a joining node, like a driver, sends the head's token only in token mode
        argv = ["env", "RAY_AUTH_MODE=token", RAY, "start", "--address", self.address, "--num-cpus", str(num_cpus)]
        name = f"node{len(self.procs)}"
        if private_dir is None:
            self._start(argv, name)
            return
        Path(private_dir).mkdir(parents=True, exist_ok=True)
        script = f"mount -t tmpfs -o size=256m tmpfs {private_dir} && exec "
        self._start(argv, name, wrap=["unshare", "--mount", "--propagation", "private", "sh", "-c", script])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_session(proc.pid)
            proc.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
