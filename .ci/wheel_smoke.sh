#!/usr/bin/env bash
# Wheel smoke: build the wheel, install it (not editable) with the vision extra into a
# fresh venv, and run the CLI from a folder outside the repository: estimate, profiles,
# calibrate (smoke sweep) into a store, fit that store, adapt with 2 samples. Each must
# succeed and leave its mark (a total, the profile list, a store, a profile file).
# Whatever the CLI reads at run time must come from the installed package.
#
#   .ci/wheel_smoke.sh              (KEEP=1 keeps the work folder; WORK=DIR puts it there)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
constraints="$repo/.ci/constraints.txt"
work="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/annette-wheel.XXXXXX")}"
mkdir -p "$work"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
start=$SECONDS
step() { echo "-- $* [$((SECONDS - start)) s]"; }
fail() { echo "wheel smoke FAILED: $*" >&2; exit 1; }
# run NAME CMD...: the command's output goes to $work/NAME.log; its tail is shown
run() {
    local name=$1; shift
    if ! "$@" >"$work/$name.log" 2>&1; then
        tr '\r' '\n' <"$work/$name.log" | tail -n 40 >&2
        fail "$name exited non-zero: $*"
    fi
    tr '\r' '\n' <"$work/$name.log" | { grep -v '^ *$' || true; } | tail -n "${TAIL:-3}"   # progress bars: last state
}

step "sources: the checkout's files without build/, *.egg-info or caches (a stale egg-info hides missing package data)"
mkdir -p "$work/src"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
        | tar --null -T - -cf -) | tar -C "$work/src" -xf -
else
    tar -C "$repo" --exclude=.git --exclude=.venv --exclude=build --exclude='*.egg-info' \
        --exclude=__pycache__ -cf - . | tar -C "$work/src" -xf -
fi

step "fresh venv (no system site-packages), setuptools to build"
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
run setuptools "$py" -m pip install -q -c "$constraints" "setuptools>=68"

step "build the wheel (no deps, no build isolation: offline)"
run wheel "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/annette_torch-*.whl)
for data in annette_torch/calibration/sweeps/smoke.csv annette_torch/calibration/sweeps/quick.csv \
            annette_torch/backends/boards/zcu102.example.toml annette_torch/profiles/builtin/; do
    "$py" -c "import sys, zipfile; names = zipfile.ZipFile(sys.argv[1]).namelist(); \
sys.exit(not any(n.startswith(sys.argv[2]) for n in names))" "$wheel" "$data" \
        || fail "the wheel lacks $data"
done
echo "$(basename "$wheel"): sweeps, board examples and built-in profiles inside"

step "install the wheel with [vision] (dependencies from the local package index, pinned by $constraints)"
run install "$py" -m pip install -q -c "$constraints" "$wheel[vision]"

cli="$work/venv/bin/annette-torch"
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
installed=$("$py" -c "import annette_torch; print(annette_torch.__file__)")
case "$installed" in "$work/venv/"*) echo "annette_torch from $installed" ;; *) fail "annette_torch imported from $installed" ;; esac

step "annette-torch estimate torchvision:resnet18"
run estimate "$cli" estimate torchvision:resnet18
grep -Eq '^total: [0-9.]+ ms' "$work/estimate.log" || fail "estimate printed no total"

step "annette-torch profiles"
run profiles "$cli" profiles
grep -q '(default): ' "$work/profiles.log" || fail "profiles listed no default profile"

step "annette-torch calibrate --backend onnxruntime-cpu --sweep smoke --out d"
run calibrate "$cli" calibrate --backend onnxruntime-cpu --sweep smoke --out d
store=$(ls -d d/onnxruntime-cpu-*/ 2>/dev/null | head -1)
[ -n "$store" ] && [ -f "$store/fingerprint.json" ] || fail "calibrate made no store under d/"

step "annette-torch fit --data d --out p"
run fit "$cli" fit --data d --out p
ls p/*.json >/dev/null 2>&1 || fail "fit wrote no profile into p/"
TAIL=1 run estimate-fitted "$cli" estimate torchvision:resnet18 --profile "$(ls p/*.json | head -1)"

step "annette-torch adapt --from onnxruntime-cpu --backend onnxruntime-cpu --samples 2 --out adapted.json"
run adapt "$cli" adapt --from onnxruntime-cpu --backend onnxruntime-cpu --samples 2 --out adapted.json
[ -s adapted.json ] || fail "adapt wrote no adapted.json"
TAIL=1 run estimate-adapted "$cli" estimate torchvision:resnet18 --profile adapted.json

step "wheel smoke passed"
