#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar engine behind constrained decoding) from its pinned
# PyPI sdist and installs the static library and headers under $XGRAMMAR_PREFIX (default
# /usr/local), where meson finds them. Nothing of xgrammar is vendored in this repository.
#
#   third_party/xgrammar/build.sh            build and install unless the pinned version is there
#
# Only the C++ library is built: no Python bindings (they need tvm-ffi), no tests, no LTO
# (its -flto=auto objects would tie the archive to one compiler's plugin). The sdist carries
# everything the library needs (3rdparty/picojson, 3rdparty/dlpack).
set -euo pipefail

version=0.2.8
prefix=${XGRAMMAR_PREFIX:-/usr/local}
stamp="$prefix/share/tandem/xgrammar-$version.stamp"
cache=${XGRAMMAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem/xgrammar-$version}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

if [ -f "$stamp" ] && [ -f "$prefix/lib/libxgrammar.a" ] && [ -f "$prefix/include/xgrammar/xgrammar.h" ]; then
  exit 0
fi

mkdir -p "$cache"
sdist="$cache/xgrammar-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  say "downloading the xgrammar $version sdist (PyPI)"
  # --no-binary for xgrammar alone: with ':all:' pip would also build every build dependency
  # it needs to read the sdist's metadata (tvm-ffi, cmake, ...) from source.
  "$python" -m pip download -q --no-deps --no-binary xgrammar "xgrammar==$version" -d "$cache"
fi
src="$cache/src"
if [ ! -f "$src/CMakeLists.txt" ]; then
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$sdist" -C "$src" --strip-components=1
fi
for need in cpp include/xgrammar 3rdparty/picojson/picojson.h 3rdparty/dlpack/include/dlpack/dlpack.h; do
  [ -e "$src/$need" ] || { echo "xgrammar sdist lacks $need" >&2; exit 1; }
done

build="$cache/build"
mkdir -p "$build"
# The sdist's cmake/config.cmake turns the Python bindings on; a config.cmake in the build
# directory takes precedence over it.
cat > "$build/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
jobs=${XGRAMMAR_JOBS:-$(nproc)}
say "building xgrammar $version (C++ core, $jobs jobs; a few minutes on 2 cores)"
cmake -G Ninja -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
# Progress as "[n/29]" on one line; the whole log is kept and its tail shown on failure.
if ! ninja -C "$build" -j"$jobs" 2>&1 | tee "$build/ninja.log" |
     awk '/^\[[0-9]+\/[0-9]+\]/ { printf "\r    %s", $1; fflush() } END { print "" }' >&2; then
  tail -n 40 "$build/ninja.log" >&2
  echo "xgrammar build failed (log: $build/ninja.log)" >&2
  exit 1
fi
mkdir -p "$prefix" 2>/dev/null || true
sudo_cmd=(); [ -w "$prefix" ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" cmake --install "$build" >/dev/null
"${sudo_cmd[@]}" mkdir -p "$(dirname "$stamp")"
echo "$version" | "${sudo_cmd[@]}" tee "$stamp" >/dev/null
say "xgrammar $version installed under $prefix"
