#!/bin/sh
# test_tools.sh GEN PACK WORKDIR: the dataset tools end to end.
# feed-gen-dataset makes the default dataset (deterministically), feed-pack
# packs it plain and re-encoded, and feed-pack --verify opens each pack the
# way feedd does and decodes every sample.
set -eu
gen=$1
pack=$2
work=$3
fail() { echo "test_tools: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"

"$gen" "$work/tree" --classes 4 --per-class 25 --seed 7
"$gen" "$work/again" --classes 4 --per-class 25 --seed 7
diff -r "$work/tree" "$work/again" >/dev/null || fail "same seed, different files"
"$gen" "$work/other" --classes 4 --per-class 25 --seed 8
cmp -s "$work/tree/class_000/img_00000.jpg" "$work/other/class_000/img_00000.jpg" &&
    fail "different seeds, same image"
"$gen" "$work/default"
n=$(find "$work/default" -type f | wc -l)
[ "$n" -eq 400 ] || fail "default dataset has $n files, want 400"

"$pack" --help > "$work/help.txt" || fail "feed-pack --help failed"
for opt in --max-side --quality --subsample --threads --verify --expect-max-side --help; do
    grep -q -- "$opt" "$work/help.txt" || fail "feed-pack --help does not describe $opt"
done
grep -q "default" "$work/help.txt" || fail "feed-pack --help gives no defaults"

"$pack" --verify "$work/tree" | tee "$work/tree.txt"
grep -q "imagefolder, 100 samples, 4 classes, .* 0 undecodable" "$work/tree.txt" ||
    fail "tree does not verify"

"$pack" "$work/tree" "$work/plain.pack" --threads 2
"$pack" --verify "$work/plain.pack" | tee "$work/plain.txt"
grep -q "pack, 100 samples, 4 classes, .* 0 undecodable" "$work/plain.txt" ||
    fail "plain pack does not verify"
# Same image bytes as the tree.
tb=$(sed 's/.* classes, \([0-9]*\) image bytes.*/\1/' "$work/tree.txt")
pb=$(sed 's/.* classes, \([0-9]*\) image bytes.*/\1/' "$work/plain.txt")
[ "$tb" = "$pb" ] || fail "plain pack holds $pb image bytes, the tree $tb"

"$pack" "$work/tree" "$work/small.pack" --max-side 160 --quality 85 --threads 2
"$pack" --verify "$work/small.pack" --expect-max-side 160 | tee "$work/small.txt"
grep -q "pack, 100 samples, 4 classes, .* 0 undecodable" "$work/small.txt" ||
    fail "re-encoded pack does not verify"

# A damaged pack is refused.
head -c 5000 "$work/plain.pack" > "$work/cut.pack"
if "$pack" --verify "$work/cut.pack" 2> "$work/cut.txt"; then
    fail "truncated pack accepted"
fi
grep -q "truncated" "$work/cut.txt" || fail "truncated pack refused without saying why"

rm -rf "$work"
echo "test_tools: ok"
