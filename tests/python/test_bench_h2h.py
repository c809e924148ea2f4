"""bench/torch/headtohead.py on the CPU (the GPU machine runs it for real): each
of the three sources trains a few steps of the real torchvision resnet18 and
writes its window records, and h2h_report.py turns them into the table and
plots. Checks structure, never speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO


def test_headtohead_runs_every_source(server, data_dir, tmp_path):
    out = tmp_path / "h2h"
    out.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH"), *sys.path] if p)
    script = REPO / "bench" / "torch" / "headtohead.py"
    for source in ("synthetic", "dataloader", "feedclient"):
        subprocess.run(
            [sys.executable, str(script), "--source", source, "--device", "cpu", "--size", "32",
             "--batch", "4", "--warmup", "0.5", "--seconds", "0.5", "--windows", "2",
             "--workers", "1", "--tree", str(data_dir / "small"), "--targets", server.target,
             "--dataset", "small", "--pids", str(server.proc.pid), "--label", f"r18-{source}",
             "--json", str(out / "h2h.jsonl"), "--series", str(out / f"series-{source}.json")],
            check=True, env=env, timeout=300)
    rows = [json.loads(line) for line in (out / "h2h.jsonl").read_text().splitlines()]
    assert [r["source"] for r in rows] == ["synthetic"] * 2 + ["dataloader"] * 2 + ["feedclient"] * 2
    for r in rows:
        assert r["images"] > 0 and r["img_per_s"] > 0 and r["host_cores"] >= 0
        assert r["wait_p50_ms"] <= r["wait_p99_ms"] <= r["wait_max_ms"]
    report = subprocess.run([sys.executable, str(REPO / "bench" / "torch" / "h2h_report.py"),
                             str(out)], check=True, capture_output=True, text=True, env=env)
    assert "| r18-feedclient | 2 |" in report.stdout
    assert (out / "h2h_throughput.png").stat().st_size > 0
    assert (out / "h2h_util_and_wait.png").stat().st_size > 0
