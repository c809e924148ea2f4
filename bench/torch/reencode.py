"""reencode.py SRC DST: every JPEG of the ImageFolder tree SRC re-encoded once
(longer side at most 400, quality 90, 4:2:0) into DST with the same names, so
that DataLoader and feedd both read these identical bytes."""

import multiprocessing
import os
import sys

from PIL import Image


def reencode(job):
    src, dst = job
    with Image.open(src) as im:
        im = im.convert("RGB")
        scale = 400 / max(im.size)
        if scale < 1:
            im = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))),
                           Image.BICUBIC)
        im.save(dst, "JPEG", quality=90, subsampling=2)


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    jobs = []
    for cls in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, cls)):
            continue
        os.makedirs(os.path.join(dst, cls), exist_ok=True)
        for name in sorted(os.listdir(os.path.join(src, cls))):
            jobs.append((os.path.join(src, cls, name), os.path.join(dst, cls, name)))
    with multiprocessing.Pool() as pool:
        pool.map(reencode, jobs)
    print(f"reencode: {len(jobs)} images into {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
