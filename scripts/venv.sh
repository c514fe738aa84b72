# Sourced by scripts/run and scripts/test: make .venv (Python >= 3.11) and install the project into it.
# Usage: ensure_venv [extra]   e.g. ensure_venv test  ->  pip install -e '.[test]'

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

ensure_venv() {
  local extra="${1:-}"
  local python="${PYTHON:-python3}"
  if ! "$python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    echo "Python >= 3.11 is required (set PYTHON=/path/to/python3.11)" >&2
    return 1
  fi
  # A virtual environment keeps Debian's externally-managed system Python untouched; it sees the
  # system site-packages so anything already installed is reused instead of downloaded again.
  if [ ! -x .venv/bin/python ]; then
    if ! "$python" -m venv --system-site-packages .venv 2>/dev/null; then
      rm -rf .venv
      as_root apt-get update -qq
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      "$python" -m venv --system-site-packages .venv
    fi
  fi
  local target="."
  [ -n "$extra" ] && target=".[$extra]"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e "$target"
}
