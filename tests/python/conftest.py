"""Fixtures for the feedclient package tests: real feedd processes on 127.0.0.1
(port 0) serving ImageFolder trees of real JPEGs made by feed-gen-dataset, and
the ImageNet sample from ../shared when it is there.

FEED_BUILD_DIR (set by ctest) names the build tree with server/feedd; the
package under test is whatever `import feedclient` finds (the test command
installs it into a virtual environment with pip first).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("FEED_BUILD_DIR", REPO / "build"))
FEEDD = BUILD / "server" / "feedd"
GEN = BUILD / "server" / "tools" / "feed-gen-dataset"
SAMPLE = Path(os.environ.get("FEED_SAMPLE_DIR", REPO.parent / "shared" / "datasets" /
                             "imagenet-sample"))

CLASSES, PER_CLASS = 4, 21  # 84 samples: batches of 8 leave a short last one


class Server:
    def __init__(self, args: List[str], workdir: Path, listen: str = "127.0.0.1:0",
                 prefix: Sequence[str] = ()):
        """prefix: a command feedd runs under, e.g. ip netns exec NS (it must exec feedd)."""
        workdir.mkdir(parents=True, exist_ok=True)
        port_file = workdir / "port"
        if port_file.exists():
            port_file.unlink()
        self.log = open(workdir / "feedd.log", "wb")
        self.proc = subprocess.Popen(
            [*prefix, str(FEEDD), "--listen", listen, "--port-file", str(port_file),
             "--log-level", "warn", *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"feedd exited with {self.proc.returncode}: "
                                   f"{(workdir / 'feedd.log').read_text()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("feedd wrote no port file within 60 s")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        self.target = f"{listen.rsplit(':', 1)[0]}:{self.port}"

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()


def make_imagefolder(path: Path, classes: int, per_class: int, seed: int) -> Path:
    subprocess.run([str(GEN), str(path), "--classes", str(classes), "--per-class",
                    str(per_class), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
    return path


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FEEDD.exists() or not GEN.exists():
        pytest.fail(f"feedd or feed-gen-dataset not built under {BUILD}")
    root = tmp_path_factory.mktemp("datasets")
    make_imagefolder(root / "small", CLASSES, PER_CLASS, 11)
    bad = make_imagefolder(root / "bad", 2, 6, 12)
    (bad / "class_000" / "zz_not_jpeg.jpg").write_bytes(b"this is not a jpeg")
    (bad / "class_001" / "zz_empty.jpg").write_bytes(b"")
    return root


def class_dirs(root: Path) -> List[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


@pytest.fixture(scope="session")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    args = ["--dataset", f"small={data_dir / 'small'}", "--dataset", f"bad={data_dir / 'bad'}",
            "--threads", "2"]
    if SAMPLE.is_dir():
        args += ["--dataset", f"sample={SAMPLE}"]
    srv = Server(args, tmp_path_factory.mktemp("feedd"))
    yield srv
    srv.stop()


@pytest.fixture
def spawn(data_dir: Path, tmp_path: Path) -> Iterator:
    """Starts extra feedd processes serving `small`; all are killed after the test."""
    started: List[Server] = []

    def start(extra: List[str] = ()) -> Server:
        srv = Server(["--dataset", f"small={data_dir / 'small'}", "--threads", "1", *extra],
                     tmp_path / f"feedd{len(started)}")
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"the ImageNet sample is not at {SAMPLE}")
    return SAMPLE


def have_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
