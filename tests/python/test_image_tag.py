"""deploy/image-tag.sh, the tag deploy/compose-test.sh builds and runs its images under: the
same sources give the same tag, an edit or a new file another one, an ignored file none; and
compose.yaml runs every image under that tag (not a "latest" that an earlier run or another
checkout may have left)."""

from __future__ import annotations

import subprocess

from conftest import REPO

TAG = REPO / "deploy" / "image-tag.sh"


def tag(root) -> str:
    out = subprocess.run([str(TAG), str(root)], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def test_tag_follows_content(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "feedd.c").write_text("int main(void) { return 0; }\n")
    (tmp_path / ".gitignore").write_text("build*/\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    first = tag(tmp_path)
    assert len(first) == 16 and first == tag(tmp_path)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "feedd.o").write_bytes(b"\0")
    assert tag(tmp_path) == first, "an ignored build output changed the tag"
    (tmp_path / "server" / "feedd.c").write_text("int main(void) { return 1; }\n")
    edited = tag(tmp_path)
    assert edited != first
    (tmp_path / "server" / "new.c").write_text("\n")
    assert tag(tmp_path) not in (first, edited)


def test_compose_runs_the_tagged_images():
    compose = (REPO / "deploy" / "compose.yaml").read_text()
    images = [ln.split("image:", 1)[1].strip() for ln in compose.splitlines()
              if ln.strip().startswith("image:")]
    assert images and all(i.endswith(":${FEED_IMAGE_TAG:-latest}") for i in images), images
    script = (REPO / "deploy" / "compose-test.sh").read_text()
    assert "FEED_IMAGE_TAG=$(./image-tag.sh ..)" in script and "export FEED_IMAGE_TAG" in script
    assert ":latest" not in script
