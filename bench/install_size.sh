#!/bin/bash
# Installed size of diagnoser: a core install and `[all]`, each into a fresh virtualenv (du -sh site-packages).
#   bash bench/install_size.sh [PYTHON]      # default python3; needs PyPI (or a mirror) reachable
set -euo pipefail
PY=${1:-python3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git -C "$SRC" archive --format=tar HEAD --prefix=src/ | tar -x -C "$WORK"
for what in core all; do
  "$PY" -m venv "$WORK/$what"
  target="$WORK/src"; [ "$what" = all ] && target="$WORK/src[all]"
  "$WORK/$what/bin/pip" install -q --disable-pip-version-check "$target"
  site=$("$WORK/$what/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$what: $(du -sh "$site" | cut -f1)  (pip itself: $(du -sh "$site/pip" | cut -f1))"
done
