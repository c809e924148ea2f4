"""bench/e2e/e2e_report.py over real feed-bench runs (simulated step, no GPU):
the table gives every source its runs, median (range) and % of the ceiling.
Checks structure, never speed."""

from __future__ import annotations

import subprocess
import sys

from conftest import BUILD, REPO


def test_e2e_report_summarises_runs(data_dir, tmp_path):
    bench = BUILD / "bench" / "e2e" / "feed-bench"
    for r in (1, 2):
        subprocess.run([str(bench), "--device", "none", "--model", "resnet18", "--source",
                        "sync,remote", "--data", str(data_dir / "small"), "--batch", "8",
                        "--steps", "3", "--warmup", "1", "--server-threads", "1",
                        "--feedd", str(BUILD / "server" / "feedd"),
                        "--out", str(tmp_path / f"run{r}")],
                       check=True, capture_output=True, timeout=300)
    out = subprocess.run([sys.executable, str(REPO / "bench" / "e2e" / "e2e_report.py"),
                          str(tmp_path)], check=True, capture_output=True, text=True).stdout
    assert "ceiling" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()
            if line.startswith("| sync") or line.startswith("| remote")}
    assert set(rows) == {"sync", "remote"}
    for line in rows.values():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        assert cells[1] == "2" and "(" in cells[2] and cells[3] != "n/a"
