#!/usr/bin/env python3
"""ratio.py PREPROC_JSONL TORCHVISION_JSONL: the engine's speed-up over
torchvision per core (1 thread vs 1 process) and on all cores, from the JSON
lines that feed-preproc-bench and torchvision_bench.py write. The torchvision
line used is the last one; each engine line gets a row."""
import json
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip().startswith("{")]


def main():
    pre, tv = lines(sys.argv[1]), lines(sys.argv[2])[-1]
    tv1, tvn = tv["img_per_s_1proc"], tv["img_per_s_nproc"]
    print(f"torchvision {tv['torchvision']} / Pillow {tv['pillow']}: {tv1:.1f} img/s on 1 process, "
          f"{tvn:.1f} on {tv['nproc']}")
    print(f"{'data':<40} {'format':<11} {'1 thread':>9} {'x tv':>6} {'N threads':>10} {'x tv':>6} "
          f"{'ref 1t':>8} {'fast/ref':>8}")
    for p in pre:
        name = p["data"][-40:]
        ref = p.get("reference_img_per_s_1t") or 0
        print(f"{name:<40} {p['format']:<11} {p['fast_img_per_s_1t']:>9.1f} "
              f"{p['fast_img_per_s_1t'] / tv1:>6.2f} {p['fast_img_per_s_nt']:>10.1f} "
              f"{p['fast_img_per_s_nt'] / tvn:>6.2f} {ref:>8.1f} "
              f"{(p['fast_img_per_s_1t'] / ref if ref else 0):>8.2f}")
        print(json.dumps({"bench": "preproc-ratio", "data": p["data"], "format": p["format"],
                          "speedup_1core": round(p["fast_img_per_s_1t"] / tv1, 3),
                          "speedup_allcores": round(p["fast_img_per_s_nt"] / tvn, 3)}))


if __name__ == "__main__":
    main()
