#!/usr/bin/env python3
"""check_links.py SITE [MARKDOWN...]: every relative link of a built site resolves.

In SITE (mkdocs' output) each <a href> and <img src> that is not absolute must
name a file of the site and, with #fragment, an id on that page. In each
MARKDOWN file (the README) each relative link must name a file or folder of the
repository and, for a docs/ page with #fragment, a heading of that page.
Exits 1 listing every broken link.
"""
import html.parser
import os
import re
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "link", "script"):
                self.links.append(a[key])


def parse(path):
    p = Page()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    return p


def external(link):
    return re.match(r"^[a-z][a-z0-9+.-]*:", link) is not None


def check_site(site):
    broken, pages = [], {}
    for d, _, files in os.walk(site):
        for f in files:
            if f.endswith(".html"):
                pages[os.path.normpath(os.path.join(d, f))] = None
    for path in sorted(pages):
        page = parse(path)
        for link in page.links:
            if external(link) or link.startswith("//"):
                continue
            target, _, frag = urllib.parse.unquote(link).partition("#")
            base = site if target.startswith("/") else os.path.dirname(path)
            dest = os.path.normpath(os.path.join(base, target.lstrip("/"))) if target else path
            if not os.path.exists(dest):
                broken.append(f"{os.path.relpath(path, site)}: {link}: no such file")
            elif frag and dest.endswith(".html"):
                if pages.get(dest) is None:
                    pages[dest] = parse(dest).ids
                if frag not in pages[dest]:
                    broken.append(f"{os.path.relpath(path, site)}: {link}: no anchor '{frag}'")
    return broken, len(pages)


def slug(heading):
    s = re.sub(r"[`*_]", "", heading.strip()).lower()
    s = re.sub(r"[^\w\s-]", "", s)
    return re.sub(r"[\s]+", "-", s).strip("-")


def check_markdown(md):
    broken, root = [], os.path.dirname(os.path.abspath(md))
    text = open(md, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", text):
        link = m.group(1)
        if external(link) or link.startswith("#"):
            continue
        target, _, frag = link.partition("#")
        dest = os.path.join(root, target)
        if not os.path.exists(dest):
            broken.append(f"{md}: {link}: no such file")
        elif frag and dest.endswith(".md"):
            heads = {slug(h) for h in re.findall(r"^#+ (.*)$", open(dest).read(), re.M)}
            if frag not in heads:
                broken.append(f"{md}: {link}: no heading '{frag}'")
    return broken


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    broken, n = check_site(sys.argv[1])
    for md in sys.argv[2:]:
        broken += check_markdown(md)
    for b in broken:
        print("broken link:", b)
    if broken:
        return 1
    print(f"check_links: {n} pages and {len(sys.argv) - 2} markdown file(s), every link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
