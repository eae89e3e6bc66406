"""Start the real `diagnoser serve` (uvicorn) in a subprocess on a free loopback port; helpers the service
tests and bench/serve_bench.py share (the CLI's verdict, verdict comparison, a job as .tar.gz, a metric's value)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "log_fixtures"
XID79 = "xid79-then-nccl-timeouts"
TOKEN = "s3cret-token-for-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`diagnoser serve` in a subprocess; `url`, `client(token)`; stopped by `stop()`."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, ready_s: float = 90.0,
                 probe: str = "/readyz") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        # the job ledger: a private directory unless the caller shares one (a restart test)
        full_env.setdefault("DIAGNOSER_SERVE__JOBS_DIR", tempfile.mkdtemp(prefix="serve-jobs-"))
        self.log = Path(full_env.get("TMPDIR", "/tmp")) / f"serve-{self.port}.log"
        self._log_fh = open(self.log, "wb")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "diagnoser.cli", "serve", "--port", str(self.port),
                                      "--log-level", "warning", *args], env=full_env, stdout=self._log_fh,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + probe, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server not ready in {ready_s} s: {self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def client(self, token: str | None = None, timeout: float = 120.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log_fh.close()


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        sample, _, rest = key.partition("{")
        got = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
        if sample == name and got == want:
            return float(value)
    return 0.0


def cli_triage(path: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "diagnoser.cli", "triage", "--json", str(path)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=120, check=True)
    return json.loads(proc.stdout)


def same_verdict(a: dict, b: dict) -> None:
    """Equal diagnosis/v1 objects apart from the scan's own duration."""
    a, b = dict(a), dict(b)
    for d in (a, b):
        d["stats"] = {k: v for k, v in d["stats"].items() if k != "seconds"}
    assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def tgz(directory: Path, **extra: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(directory, arcname=".")
        for name, data in extra.items():
            info = tarfile.TarInfo(name.replace("__", "/"))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
