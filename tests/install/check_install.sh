#!/bin/sh
# Installs the build into a staging DESTDIR and builds a consumer program
# against it three ways: pkg-config (shared), pkg-config --static, and
# CMake find_package(rlpost). Skips (77) when cmake or pkg-config is absent.
set -eu
build=$1 src=$2
command -v pkg-config >/dev/null && command -v cmake >/dev/null || { echo "pkg-config/cmake absent: skipped"; exit 77; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
meson install -C "$build" --destdir "$stage" --no-rebuild --quiet >/dev/null
prefix=$(meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
root="$stage$prefix"
pcdir=$(dirname "$(find "$root" -name rlpost.pc | head -1)")
libdir=$(dirname "$pcdir")
cc=${CC:-cc}
PKG_CONFIG_PATH=$pcdir
export PKG_CONFIG_PATH
flags="--define-variable=prefix=$root"
# shellcheck disable=SC2046
$cc -std=c11 -Wall -Werror -o "$stage/c_shared" "$src/consumer.c" $(pkg-config $flags --cflags --libs rlpost)
LD_LIBRARY_PATH=$libdir "$stage/c_shared"
# every header of include/rlpost/ is installed and compiles alone from the
# installed include folder as <rlpost/NAME.h>
n=0
for h in "$src"/../../include/rlpost/*.h; do
    name=$(basename "$h")
    printf '#include <rlpost/%s>\nint main(void) { return 0; }\n' "$name" > "$stage/one.c"
    # shellcheck disable=SC2046
    $cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only "$stage/one.c" $(pkg-config $flags --cflags rlpost) ||
        { echo "installed <rlpost/$name> does not compile alone"; exit 1; }
    n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "no include/rlpost/*.h beside $src"; exit 1; }
# static archive, its dependencies linked dynamically (as a host would);
# oneDNN too when the build found it (it has no .pc file: rlpost.pc's
# Libs.private names it)
dnnl=$(pkg-config $flags --static --libs rlpost | tr ' ' '\n' | grep -x -- -ldnnl)
# shellcheck disable=SC2046
$cc -std=c11 -Wall -Werror -o "$stage/c_static" "$src/consumer.c" $(pkg-config $flags --cflags rlpost) \
    "$libdir/librlpost.a" $(pkg-config --libs jansson libcurl libpcre2-8 icu-uc) -lopenblas $dnnl -lpthread -ldl -lm
"$stage/c_static"
mkdir "$stage/cmake-build"
cmake -S "$src" -B "$stage/cmake-build" -DCMAKE_PREFIX_PATH="$root" >/dev/null
cmake --build "$stage/cmake-build" >/dev/null
LD_LIBRARY_PATH=$libdir "$stage/cmake-build/consumer_shared"
"$stage/cmake-build/consumer_static"
echo "pkg-config (shared, static) and CMake (shared, static) consumers built and ran; $n headers of rlpost/ compile alone"
