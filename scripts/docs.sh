#!/usr/bin/env bash
# docs.sh [OUT]: builds the documentation site (mkdocs.yml, docs/) with Debian's
# mkdocs into OUT (default build-docs/), strict: a link to a missing page or a
# page left out of the nav fails it; then checks every link and anchor of the
# built site and of README.md. Open OUT/index.html in a browser.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-docs}
scripts/deps.sh docs
mkdocs build --strict --quiet --site-dir "$out"
python3 scripts/check_links.py "$out" README.md
