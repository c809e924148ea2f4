"""The table of run.sh from preproc.jsonl: tree against tar shards, per round."""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
tree = [r for r in rows if r["format"] == "imagefolder"]
tar = [r for r in rows if r["format"] == "tar"]
assert len(tree) == len(tar) == 5


def med(v, d=1):
    return f"{statistics.median(v):,.{d}f} ({min(v):,.{d}f}-{max(v):,.{d}f})"


def run(r, threads, key):
    return next(x[key] for x in r["runs"] if x["threads"] == threads)


def line(label, a, b, d=1):
    ratios = [y / x for x, y in zip(a, b)]
    print(f"| {label} | {med(a, d)} | {med(b, d)} | {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f}) |")


print("| | tree | tar shards | shards / tree, per round |")
print("| --- | ---: | ---: | ---: |")
for t in (1, 2):
    line(f"img/s, {t} thread{'s' if t > 1 else ''}", [run(r, t, "img_per_s") for r in tree],
         [run(r, t, "img_per_s") for r in tar])
for t in (1, 2):
    line(f"img per CPU-second, {t} thread{'s' if t > 1 else ''}",
         [1000 / run(r, t, "cpu_ms") for r in tree], [1000 / run(r, t, "cpu_ms") for r in tar])
for t in (1, 2):
    line(f"read ms/sample, {t} thread{'s' if t > 1 else ''}", [run(r, t, "read_ms") for r in tree],
         [run(r, t, "read_ms") for r in tar], 3)
print()
print("median (range) of 5 rounds; img/s: images read, decoded, cropped and resized to 224x224;")
print("CPU-second: the bench threads' CPU time (user + system); read ms: feed_dataset_read per")
print("sample, wall time (tree: open, fstat, read, close; shards: one pread)")
