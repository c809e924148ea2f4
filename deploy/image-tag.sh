#!/usr/bin/env bash
# deploy/image-tag.sh [ROOT]: prints the tag deploy/compose-test.sh gives the
# images it builds: 16 hex digits of a SHA-256 over the path and content of
# every file a fresh clone of ROOT (a git work tree; default this repository)
# would have, uncommitted edits included. An image is reused only when the
# sources it was built from are the same: an edit since the last run, or
# another checkout on the same machine, gets its own image instead of a stale
# "latest".
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
git ls-files -z --cached --others --exclude-standard | sort -z |
  while IFS= read -r -d '' f; do
    if [ -f "$f" ]; then printf '%s\0' "$f"; fi
  done | xargs -0 -r sha256sum | sha256sum | cut -c1-16
