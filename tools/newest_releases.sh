#!/usr/bin/env bash
# The suite against the newest release of every test dependency, or the pins refreshed from them.
#
#   tools/newest_releases.sh [PYTEST ARGS...]   # a fresh environment with the newest releases
#                                               # (constraints.txt ignored), then python -m pytest
#   tools/newest_releases.sh --freeze           # the same environment, written to constraints.txt
#
# The README's test command installs the pinned versions of constraints.txt, so a release elsewhere
# cannot turn the suite red; this script shows what the next refresh of the pins will meet. It is
# not part of CI's gate. The environment is made in a temporary folder and removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet --upgrade -e '.[test]'
if [ "${1:-}" = "--freeze" ]; then
    {
        echo "# The test environment, pinned: python -m pip install -e '.[test]' -c constraints.txt"
        echo "# Written by tools/newest_releases.sh --freeze on $(python -c 'import platform; print("CPython", platform.python_version(), platform.machine())');"
        echo "# refresh on purpose (docs/contributing.md, \"The pinned test environment\")."
        # torch's local label (+cpu) is left off: 2.13.0 is the CPU wheel this machine kind carries.
        python -m pip freeze --all --exclude-editable | grep -v "^pip==" | sed -E 's/^(torch==[^+]*)\+.*/\1/' | LC_ALL=C sort -f
    } > constraints.txt
    echo "constraints.txt: $(grep -c '==' constraints.txt) pins"
    exit 0
fi
python -m pip freeze --exclude-editable > "$work/newest.txt"
echo "what differs from constraints.txt (pinned -> newest):"
python - "$work/newest.txt" <<'PY' || true
import re, sys
def pins(path):
    out = {}
    for line in open(path):
        m = re.match(r"([A-Za-z0-9_.-]+)==([^\s;]+)", line)
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2).split("+")[0]
    return out
old, new = pins("constraints.txt"), pins(sys.argv[1])
changed = [f"  {k}: {old.get(k, '-')} -> {new.get(k, '-')}" for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]
print("\n".join(changed) or "  nothing: the pins are the newest releases")
PY
python -m pytest "$@"
