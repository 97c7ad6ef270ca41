#!/usr/bin/env bash
# Builds .whl/ (ignored through .git/info/exclude; named in the device tool's `carry`): what
# tools/gpu_check.sh's vllm-offload-worker step needs on a lent GPU machine (Python 3.12,
# torch 2.11, no network) that its image lacks. About 8 MB:
#   vllm-py.tar.xz      vLLM's Python files and dist-info from its wheel, no compiled file:
#                       its *.so are built for vLLM's own torch (2.14) and make the wheel 336 MB
#                       (sim/vllm/offload_worker.py stands in for the one op the worker calls)
#   *.whl               Hypothesis at the test group's pin (the catalogue's budgets), and
#                       cp312 manylinux wheels of what the worker's import chain needs there
#                       (vllm.v1.kv_offload.cpu.gpu_worker under vLLM's CUDA platform: msgspec,
#                       pyzmq), pinned as sim/vllm/requirements/lock-common.txt pins them; the
#                       machine has the rest (found by importing the chain in a Python 3.12
#                       venv with torch 2.11 and the image's packages, nothing else)
#   harness-commit.txt  the commit (and uncommitted files) the tree was carried at: the tree
#                       travels without .git, and the record cites this
#
# Usage: tools/gpu_carry.sh [VLLM_WHEEL]    (default: pip downloads vllm==0.33.0's wheel)
# On the machine, before tools/gpu_check.sh:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && tar -xJf .whl/vllm-py.tar.xz -C /tmp/site \
#       && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_RELEASE=0.33.0
WHEELS=(msgspec pyzmq)
LOCK=sim/vllm/requirements/lock-common.txt
OUT=.whl

mkdir -p .git/info
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf "$OUT" && mkdir -p "$OUT"

download() {    # cp312 manylinux wheels, as the machine's Python 3.12 takes them
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$1" "${@:2}"
}

pins=()
for name in "${WHEELS[@]}"; do
    pin=$(grep -i "^$name==" "$LOCK") || { echo "gpu_carry: $name has no pin in $LOCK;" \
        "add it there (the version vLLM's imports were checked with)" >&2; exit 1; }
    pins+=("$pin")
done
# Hypothesis as the test group pins it (pyproject.toml): the catalogue's budgets (examples to
# catch each race switch) were measured with that version's generator, and the image's own
# Hypothesis is another release. Pure Python; the image has its attrs and sortedcontainers.
pins+=("$(python3 -c 'import tomllib; print(next(p for p in tomllib.load(open("pyproject.toml",
    "rb"))["dependency-groups"]["test"] if p.startswith("hypothesis==")))')")
download "$OUT" "${pins[@]}"

wheel=${1:-}
if [ -z "$wheel" ]; then
    cache=${TMPDIR:-/tmp}/gpu_carry.vllm-$VLLM_RELEASE
    mkdir -p "$cache"
    found=("$cache"/vllm-"$VLLM_RELEASE"-*.whl)
    if [ ! -f "${found[0]}" ]; then
        python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
            --python-version 3.12 -d "$cache" "vllm==$VLLM_RELEASE"
        found=("$cache"/vllm-"$VLLM_RELEASE"-*.whl)
    fi
    wheel=${found[0]}
fi

python3 - "$wheel" "$OUT/vllm-py.tar.xz" <<'EOF'
"""vLLM's Python files (and the few data files its modules read) out of its wheel, into a
reproducible tar.xz: no compiled file, no C++ header, no binary."""
import io, sys, tarfile, zipfile

wheel, out = sys.argv[1], sys.argv[2]
KEEP = (".py", ".pyi", ".json", ".jinja", ".txt", ".typed", ".yaml", ".yml", ".md")
with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:xz", preset=6) as tar:
    kept = 0
    for info in sorted(z.infolist(), key=lambda i: i.filename):
        name = info.filename
        if info.is_dir() or not (".dist-info/" in name or name.endswith(KEEP)):
            continue
        if name.endswith((".so",)) or "/include/" in name:
            continue
        data = z.read(info)
        entry = tarfile.TarInfo(name)
        entry.size, entry.mtime, entry.mode = len(data), 0, 0o644
        tar.addfile(entry, io.BytesIO(data))
        kept += 1
print(f"gpu_carry: {kept} files of {wheel.rsplit('/', 1)[-1]} -> {out}")
EOF

{
    echo "commit $(git rev-parse HEAD)"
    changed=$(git status --porcelain --untracked-files=no | wc -l)
    echo "uncommitted changes to $changed tracked files when .whl was built"
} > "$OUT/harness-commit.txt"

ls -l "$OUT"
du -sh "$OUT"
