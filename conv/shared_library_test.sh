#!/bin/bash
# libconv2d.so is self-contained: copied into an empty folder with the Abseil libraries it names
# (NEEDED), it loads with an empty LD_LIBRARY_PATH and every one of them resolves inside that
# folder, through its RUNPATH ($ORIGIN), not to the system's copies; its RUNPATH names no Bazel
# _solib_ folder; NEEDED holds only libraries it uses (fewer Abseil libraries than Debian has).
set -euo pipefail
lib="$1"
check="$2"  # tools/check_self_contained.sh
dir="${TEST_TMPDIR:-$(mktemp -d)}/pkg"
rm -rf "$dir" && mkdir -p "$dir"
cp "$lib" "$dir/libconv2d.so"
runpath=$(readelf -d "$lib" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
echo "RUNPATH: $runpath"
case "$runpath" in
  *_solib_*) echo "FAIL: RUNPATH points into Bazel's build tree"; exit 1 ;;
  '$ORIGIN'*) ;;
  *) echo "FAIL: RUNPATH does not start with \$ORIGIN"; exit 1 ;;
esac
absl=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(libabsl_[^]]*\)\]/\1/p')
n=$(echo "$absl" | grep -c . || true)
total=$(ldconfig -p | grep -c 'libabsl_.*\.so\.[0-9]' || true)
echo "NEEDED: $n Abseil libraries (the system has $total)"
[ "$n" -gt 0 ] && [ "$n" -lt "$total" ] || { echo "FAIL: NEEDED lists every Abseil library"; exit 1; }
for a in $absl; do
  # awk reads to the end: had it exited at the match, ldconfig's next write could die of
  # SIGPIPE, which pipefail and set -e turn into a failed test (seen once in CI).
  src=$(ldconfig -p | awk -v n="$a" '$1 == n && !found {print $NF; found = 1}')
  [ -n "$src" ] || { echo "FAIL: $a is not on this machine"; exit 1; }
  cp -L "$src" "$dir/$a"
done
"$check" "$dir/libconv2d.so"
# Loads, and the C ABI answers (no GPU needed to list the algorithms).
env -i PATH="$PATH" python3 - "$dir/libconv2d.so" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])  # cuBLAS through the RUNPATH's toolkit folder
lib.conv2d_algorithm_count.restype = ctypes.c_int
n = lib.conv2d_algorithm_count()
assert n > 0, n
print(f"loaded with an empty environment: {n} algorithms")
PY
echo "PASS"
