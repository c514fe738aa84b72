# Sourced by scripts/run and scripts/test: make an isolated virtual environment (Python >= 3.11)
# and install the project into it, printing one line per step.
#
#   ensure_venv [DIR] [EXTRAS] [CONSTRAINTS]
#     ensure_venv .venv              ->  pip install -e .
#     ensure_venv .venv test,bench   ->  pip install -e '.[test,bench]'
#     ensure_venv .venv-floors test constraints/floors.txt  ->  ... -c constraints/floors.txt
#
# The environment sees only what the project installs: it is created WITHOUT
# --system-site-packages, so a package that happens to be installed on the machine can never make a
# test pass (tests/ci/test_environment.py checks pyvenv.cfg). The install is skipped when nothing it
# depends on changed since the last successful one (pyproject.toml, the extras, the constraints file,
# the interpreter): an editable install picks up code changes by itself.

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

step() { printf '==> %s\n' "$*"; }

# The install stamp: what the last successful install of DIR was made from (the extras are kept beside
# it, so an install with more extras also serves a later call that asks for fewer).
_install_stamp() {
  local python="$1" constraints="$2"
  {
    "$python" -c 'import sys; print(sys.version)'
    cat pyproject.toml
    if [ -n "$constraints" ]; then cat "$constraints"; fi
  } | sha256sum | cut -d' ' -f1
}

# Whether the comma-separated extras $1 are all among $2.
_extras_within() {
  local extra
  for extra in ${1//,/ }; do
    case ",$2," in *",$extra,"*) ;; *) return 1 ;; esac
  done
}

# How many requirements the install resolves from (runtime + the chosen extras), for the step line.
_requirement_count() {
  "$1" - "$2" <<'EOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = [e for e in sys.argv[1].split(",") if e]
print(len(project.get("dependencies", [])) + sum(len(project["optional-dependencies"][e]) for e in extras))
EOF
}

ensure_venv() {
  local dir="${1:-.venv}" extras="${2:-}" constraints="${3:-}"
  local python="${PYTHON:-python3}"
  if ! "$python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    echo "Python >= 3.11 is required (set PYTHON=/path/to/python3.11)" >&2
    return 1
  fi
  # An environment made by an older version of this script saw the system site-packages: rebuild it.
  if [ -f "$dir/pyvenv.cfg" ] && grep -qiE '^include-system-site-packages *= *true' "$dir/pyvenv.cfg"; then
    step "recreating $dir: it was made with --system-site-packages"
    rm -rf "$dir"
  fi
  if [ ! -x "$dir/bin/python" ]; then
    step "creating $dir with $("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])') (isolated: no system site-packages)"
    rm -rf "$dir"
    if ! "$python" -m venv "$dir" 2>/dev/null; then
      rm -rf "$dir"
      step "installing python3-venv (apt-get)"
      as_root apt-get update -qq
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      "$python" -m venv "$dir" || return 1
    fi
  fi
  local stamp stamped="" stamped_extras=""
  stamp="$(_install_stamp "$dir/bin/python" "$constraints")"
  if [ -f "$dir/.install-stamp" ]; then
    { read -r stamped; read -r stamped_extras; } < "$dir/.install-stamp" || true
  fi
  if [ "$stamped" = "$stamp" ] && _extras_within "$extras" "$stamped_extras"; then
    step "$dir is up to date (pyproject.toml${extras:+, extras $extras}${constraints:+, $constraints} unchanged): nothing to install"
    return 0
  fi
  local target="." how=""
  [ -n "$extras" ] && target=".[$extras]"
  [ -n "$constraints" ] && how=" pinned by $constraints"
  step "installing gpu-pod-exporter${extras:+[$extras]} into $dir: $(_requirement_count "$dir/bin/python" "$extras") requirements and their dependencies$how"
  rm -f "$dir/.install-stamp"
  local args=(install --disable-pip-version-check -e "$target")
  [ -n "$constraints" ] && args+=(-c "$constraints")
  "$dir/bin/python" -m pip "${args[@]}" || return 1
  printf '%s\n%s\n' "$stamp" "$extras" > "$dir/.install-stamp"
}
