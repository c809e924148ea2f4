"""installed_loop.py FEEDD DATASET_DIR [EPOCHS]: the installed pieces end to end. Starts
FEEDD on 127.0.0.1 (port 0) serving DATASET_DIR (an ImageFolder tree) as "data", imports
feedclient as installed (FEEDCLIENT_LIBRARY must not be set: the package finds its library
itself) and runs EPOCHS (default 2) epochs on the host path, checking that each one has every
sample exactly once. Prints the library it loaded; exits non-zero on any failure.

Run by tests/client/install_test.sh (an install into temporary prefixes) and by
scripts/clean-container-ci.sh (the README's commands in a clean Debian 12 container)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time


def main() -> int:
    feedd, data = sys.argv[1], sys.argv[2]
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    if "FEEDCLIENT_LIBRARY" in os.environ:
        print("installed_loop: FEEDCLIENT_LIBRARY is set; this checks the package without it")
        return 2
    import torch

    import feedclient

    print(f"installed_loop: feedclient {feedclient.library_version()} from "
          f"{feedclient.library_path}")
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        log = open(os.path.join(tmp, "feedd.log"), "wb")
        proc = subprocess.Popen([feedd, "--listen", "127.0.0.1:0", "--port-file", port_file,
                                 "--dataset", f"data={data}", "--threads", "2",
                                 "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(port_file):
                if proc.poll() is not None or time.monotonic() > deadline:
                    print(f"installed_loop: feedd did not start: "
                          f"{open(os.path.join(tmp, 'feedd.log')).read()}")
                    return 1
                time.sleep(0.02)
            target = f"127.0.0.1:{int(open(port_file).read())}"
            with feedclient.Loader([target], "data", batch_size=32, seed=1, device="cpu",
                                   size=64, dtype=torch.uint8, with_indices=True) as loader:
                for epoch in range(epochs):
                    loader.set_epoch(epoch)
                    seen = [i for _, _, idx in loader for i in idx.tolist()]
                    if sorted(seen) != list(range(loader.dataset_size)):
                        print(f"installed_loop: epoch {epoch} did not have every sample once")
                        return 1
                    print(f"installed_loop: epoch {epoch}: {len(seen)} samples, "
                          f"{len(loader)} batches")
        finally:
            proc.kill()
            proc.wait()
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
