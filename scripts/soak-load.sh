# Sourced by scripts/test: the load a soak runs under, so that "green in a soak" means green on a
# machine busier than the one the tests were written on (issue 42: a fresh clone failed under an image
# build and several Prometheus rigs beside it, load 5 to 20 on 2 cores).
#
#   start_soak_load   ->  stress-ng $SOAK_LOAD in the background (default --cpu 4 --io 2 --vm 1),
#                         installed from Debian when missing; SOAK_LOAD=none runs without it
#   stop_soak_load    ->  stops it (scripts/test traps EXIT, so a red run or ^C stops it too)
#   load_average      ->  the 1-minute load average, printed with each run's result
# Needs step and as_root from scripts/venv.sh.

SOAK_LOAD_DEFAULT="--cpu 4 --io 2 --vm 1"
soak_load_pid=""

start_soak_load() {
  local load="${SOAK_LOAD:-$SOAK_LOAD_DEFAULT}"
  if [ "$load" = "none" ]; then
    step "soak without load (SOAK_LOAD=none)"
    return 0
  fi
  if ! command -v stress-ng >/dev/null 2>&1; then
    step "installing stress-ng (Debian package stress-ng, apt-get) for the soak's load"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null
  fi
  step "soak load: stress-ng $load, beside every run until the soak ends"
  # shellcheck disable=SC2086  # the load is a list of stress-ng options
  stress-ng $load --quiet &
  soak_load_pid=$!
  sleep 1
  if ! kill -0 "$soak_load_pid" 2>/dev/null; then
    wait "$soak_load_pid" || true
    echo "scripts/test: stress-ng $load exited at once (see its message above)" >&2
    soak_load_pid=""
    return 1
  fi
}

stop_soak_load() {
  if [ -n "$soak_load_pid" ]; then
    kill -TERM "$soak_load_pid" 2>/dev/null || true
    wait "$soak_load_pid" 2>/dev/null || true
    soak_load_pid=""
  fi
}

load_average() { cut -d' ' -f1 /proc/loadavg; }
