"""fleet_collect.py WORK TAG DATA MODEL SERVERS THREADS CLIENTS: one JSON line for
one fleet configuration, from each client's feed-bench summary.json."""

import json
import os
import sys


def main() -> int:
    work, tag, data, model = sys.argv[1:5]
    servers, threads, clients = (int(x) for x in sys.argv[5:8])
    per_client = []
    for k in range(clients):
        path = os.path.join(work, f"{tag}-r{k}", "summary.json")
        try:
            with open(path) as f:
                s = json.load(f)
            run = next(r for r in s["runs"] if r["source"] == "remote")
            per_client.append({"rank": k, "images_per_s": run["images_per_s"],
                               "busy": run["gpu_busy"], "wait_p99_ms": run["wait_p99_ms"],
                               "us_per_image": s["meta"]["target_us_per_image"]})
        except (OSError, KeyError, StopIteration, json.JSONDecodeError) as e:
            per_client.append({"rank": k, "error": f"{path}: {e}"})
    print(json.dumps({"tag": tag, "data": data, "model": model, "servers": servers,
                      "threads": threads, "clients": clients, "per_client": per_client}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
