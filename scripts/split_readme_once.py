#!/usr/bin/env python3
"""One-off: split the long README into docs/ pages (run from the repo root)."""
import os
import re
import sys

lines = open("README.md").read().split("\n")

# (marker regex, page, heading to start the section with or None)
SECTIONS = [
    (r"^## What it is", "index.md"),
    (r"^## Using it", None),
    (r"^### Serve a dataset", "guide/serving.md"),
    (r"^### Serve from a bucket or URLs", "guide/remote.md"),
    (r"^### Feed a training job", "guide/c-client.md"),
    (r"^### Train with PyTorch", "guide/pytorch.md"),
    (r"^### Deploy", "guide/deploy.md"),
    (r"^## Performance", "performance.md"),
    (r"^### How many server cores per GPU", "guide/sizing.md"),
    (r"^## Reliability and security", "guide/security.md"),
    (r"^## Design decisions", None),
    (r"^\*\*Randomness", "design/data.md"),
    (r"^\*\*Server\.", "design/server.md"),
    (r"^\*\*Transport guard", "design/transport.md"),
    (r"^\*\*Decoded cache against the file", "design/server.md"),
    (r"^\*\*Listening and descriptors", "design/transport.md"),
    (r"^\*\*Paused clients", "design/server.md"),
    (r"^\*\*Client\.", "design/client.md"),
    (r"^\*\*Locks in feedd", "design/server.md"),
    (r"^\*\*Scheduler and transport", "design/client.md"),
    (r"^\*\*Benchmark\.", "performance.md"),
    (r"^\*\*Remote objects", "design/data.md"),
    (r"^### Augmentations", "design/data.md"),
    (r"^## Layout", "development/layout.md"),
    (r"^## Tests", "development/tests.md"),
]

TITLES = {
    "index.md": "feedd",
    "guide/serving.md": "Serve a dataset",
    "guide/remote.md": "Serve from a bucket or URLs",
    "guide/c-client.md": "Feed a training job from C",
    "guide/pytorch.md": "Train with PyTorch: the feedclient package",
    "guide/deploy.md": "Deploy",
    "guide/sizing.md": "How many server cores per GPU?",
    "guide/security.md": "Reliability and security",
    "performance.md": "Performance",
    "design/data.md": "Design: data, transforms and sources",
    "design/server.md": "Design: the server",
    "design/transport.md": "Design: ports, connections and the transport guard",
    "design/client.md": "Design: the client",
    "development/layout.md": "Source layout",
    "development/tests.md": "Tests",
}

start = next(i for i, l in enumerate(lines) if re.match(SECTIONS[0][0], l))
pages = {}
page = None
in_code = False
for i in range(start, len(lines)):
    l = lines[i]
    if l.startswith("```"):
        in_code = not in_code
    if not in_code:
        for rx, p in SECTIONS:
            if re.match(rx, l):
                page = p
                if l.startswith("#") and p and TITLES.get(p, "").split(":")[0] in l:
                    l = None  # the page title replaces it
                elif l.startswith("## ") and p is None:
                    l = None
                break
    if page is None or l is None:
        continue
    pages.setdefault(page, []).append(l)


def fix_links(text, page):
    depth = page.count("/")
    up = "../" * depth

    def repl(m):
        bang, label, target = m.group(1), m.group(2), m.group(3)
        if re.match(r"^(https?:|mailto:|#)", target):
            return m.group(0)
        path = target.split("#")[0]
        if path.startswith("docs/"):
            return f"{bang}[{label}]({up}{target[5:]})"
        # a repository file outside the site: named as a path, not linked
        if bang:
            return f"(plot: `{path.rstrip('/')}`)"
        plain = label.strip("`")
        if plain.rstrip("/") == path.rstrip("/") or plain == os.path.basename(path.rstrip("/")):
            return f"`{path.rstrip('/')}`"
        return f"{label} (`{path.rstrip('/')}`)"

    return re.sub(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)", repl, text)


for p, body in pages.items():
    # promote headings: the section's own level becomes the page's h2
    out = []
    code = False
    for l in body:
        if l.startswith("```"):
            code = not code
        m = re.match(r"^(#{2,6}) (.*)", l)
        if m and not code:
            lvl = len(m.group(1))
            base = 2 if p in ("index.md", "performance.md", "guide/security.md",
                              "development/layout.md", "development/tests.md") else 3
            new = max(2, lvl - base + 2)
            l = "#" * new + " " + m.group(2)
        out.append(l)
    text = "\n".join(out).strip("\n")
    text = fix_links(text, p)
    path = os.path.join("docs", p)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"# {TITLES[p]}\n\n{text}\n")
    print(p, len(out))
