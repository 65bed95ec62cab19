#!/bin/bash
# check_self_contained.sh LIB: the libconv2d.so at LIB loads its libraries with an empty
# environment: ldd finds every one (nothing "not found") and every Abseil library in LIB's own
# folder (its RUNPATH, $ORIGIN), at least one of them, none from the system. The one check
# behind //conv:conv2d_shared_library_test, //python:wheel_test and the GPU bundle's python step.
set -euo pipefail
lib="${1:-}"
[ -f "$lib" ] || { echo "FAIL: no library at '$lib'"; exit 1; }
dir=$(cd "$(dirname "$lib")" && pwd)
resolved=$(env -i PATH="/usr/bin:/bin" ldd "$lib")
echo "$resolved" | grep -E 'cublas|not found' || true
if echo "$resolved" | grep -q 'not found'; then echo "FAIL: unresolved libraries"; exit 1; fi
bad=$(echo "$resolved" | grep 'libabsl_' | grep -v "=> $dir/" || true)
if [ -n "$bad" ]; then echo "FAIL: Abseil resolved outside $dir:"; echo "$bad"; exit 1; fi
n=$(echo "$resolved" | grep -c "libabsl_.* => $dir/" || true)
[ "$n" -gt 0 ] || { echo "FAIL: no Abseil library resolved in $dir"; exit 1; }
echo "$n Abseil libraries resolved in $dir"
