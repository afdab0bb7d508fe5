#!/usr/bin/env bash
# tandem setup: installs what the build, the default model and the tests need, builds, and then
#   etc/setup.sh          sets up only
#   etc/setup.sh serve    sets up, then runs the server on etc/tandem.toml (127.0.0.1:8000)
#   etc/setup.sh test     sets up, then runs the whole test suite (meson test: unit + e2e) and a
#                         bounded fuzz run (tools/fuzz.sh)
# Idempotent: a second run installs nothing new and rebuilds only what changed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mode=${1:-setup}
case "$mode" in setup|serve|test) ;; *) echo "usage: etc/setup.sh [setup|serve|test]" >&2; exit 2;; esac

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# --- Debian packages ---------------------------------------------------------------------------
apt_packages=(
  build-essential pkg-config cmake meson ninja-build python3 python3-venv
  libuv1-dev libsimdjson-dev libmimalloc-dev doctest-dev libtomlplusplus-dev libxxhash-dev
  libpcre2-dev libfmt-dev node-llhttp curl
  clang-16 libclang-rt-16-dev  # libFuzzer + sanitizers for tools/fuzz.sh (clang 14 lacks std::source_location)
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is optional: when present under /usr/local/cuda the CUDA backend is built.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

# --- Python venv for tests, reference tools and benchmark clients (never used by the server) ----
stamp=.venv/.requirements.sha256
want=$(cat etc/requirements-*.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "creating the Python venv (.venv) from etc/requirements-*.txt"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  for req in etc/requirements-*.txt; do .venv/bin/python -m pip install -q -r "$req"; done
  echo "$want" > "$stamp"
fi

# --- xgrammar: the grammar engine of constrained decoding, built from its pinned PyPI sdist ------
third_party/xgrammar/build.sh

# --- Build -------------------------------------------------------------------------------------
if [ ! -f build/build.ninja ]; then
  say "configuring build/ (meson, release)"
  meson setup build --buildtype=release >/dev/null
fi
say "building"
# Ninja writes one "[N/M] ..." line per step. Show a line per tenth of the build (and every
# compiler message) so a long build visibly moves without flooding CI logs.
ninja -C build -j"$(nproc)" | awk '
  /^\[[0-9]+\/[0-9]+\]/ {
    split(substr($1, 2), n, "/"); pct = int(100 * n[1] / n[2])
    if (pct >= shown) { printf "    %3d%% (%d/%d steps)\n", pct, n[1], n[2]; fflush(); shown = pct - pct % 10 + 10 }
    next
  }
  { print; fflush() }'

# --- Default model -----------------------------------------------------------------------------
if [ -x tools/setup_model.sh ]; then tools/setup_model.sh; fi

case "$mode" in
  serve)
    say "starting tandem on etc/tandem.toml"
    exec build/tandem --config etc/tandem.toml ;;
  test)
    say "running the test suite"
    status=0
    meson test -C build --print-errorlogs || status=$?
    .venv/bin/python tools/test_summary.py build/meson-logs/testlog.json || true
    # Every fuzz target for a fixed number of inputs from its seed corpus with a fixed seed: the
    # same search on any machine (5-25 s a target here; about 5 minutes on 2 cores with the clang
    # build); the long run is in the README ("Fuzzing").
    say "fuzzing (tools/fuzz.sh --runs 300000)"
    tools/fuzz.sh --runs 300000 || status=$?
    exit $status ;;
esac
