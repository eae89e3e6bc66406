"""A real chromadb server (`chroma run`) on loopback for the shared-memory tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from net_support import free_port, stop, wait_http


class ChromaServer:
    """`chroma run --path DIR --host 127.0.0.1 --port N`; `stop()` and `start()` keep the data and port."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = data.parent / f"{data.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ChromaServer:
        exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or "chroma"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([exe, "run", "--path", str(self.data), "--host", "127.0.0.1",
                                          "--port", str(self.port)], stdout=log, stderr=subprocess.STDOUT)
        wait_http(f"{self.url}/api/v2/heartbeat", self.proc, timeout=60)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None
