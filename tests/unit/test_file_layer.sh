#!/bin/sh
# test_file_layer.sh RESULT — every file the project's product code opens goes through the one
# file layer: shim/file.c in C (DESIGN.md "Files the project reads and writes"), and
# python/ldshim_ab/fileio.py in Python. Fails on any call that opens or creates a file
# outside them.
#
# C: shim/, policy/, tools/ (*.c, *.h), kernels/ (*.c, *.h, *.cu, *.cuh). The calls looked for
# are every libc entry that opens or creates a file system object by name or turns a
# descriptor into a stream: open openat open64 openat64 creat creat64 fopen fopen64 freopen
# fdopen opendir mkdir mkdirat mkstemp mkostemp mkfifo truncate. Allowed: shim/file.c (the
# layer) and nothing else. dlopen is not matched (a library is loaded by the dynamic loader,
# from a descriptor the layer checked: shim/driver.c); mkdtemp (a new private directory, never an
# existing name) and open_memstream (memory, no file) are not file opens.
#
# Python: every Python tool a user runs, by the AST check of tests/ab/test_fileio.py (below).
#
# A comment line is skipped (C lines starting with /*, *, //).
set -u
result=$1
cd "$(dirname "$0")/../.." || exit 2
pass=0
fail=0

c_calls='(^|[^A-Za-z0-9_.>])(open|openat|open64|openat64|creat|creat64|fopen|fopen64|freopen|fdopen|opendir|mkdir|mkdirat|mkstemp|mkostemp|mkfifo|truncate)[[:space:]]*\('
c_files=$(find shim policy tools kernels -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
            ! -path shim/file.c | sort)
hits=$(for f in $c_files; do
         grep -nE "$c_calls" "$f" | grep -vE '^[0-9]+:[[:space:]]*(/\*|\*|//)' | sed "s|^|$f:|"
       done)
if [ -n "$hits" ]; then
    echo "test-file-layer: FAIL: C code opens files outside shim/file.c (use ld_file_*):"
    echo "$hits" | sed 's/^/  /'
    fail=$((fail + 1))
else
    echo "test-file-layer: C: $(echo "$c_files" | wc -w) files, no open outside shim/file.c"
    pass=$((pass + 1))
fi

# The check itself: a planted call is found (so a broken pattern cannot pass quietly).
probe=$(printf 'int f(void) { return open("x", 0); }\nFILE *g(void) { return fopen("x", "r"); }\n' | grep -cE "$c_calls")
if [ "$probe" = 2 ] && ! printf 'void *h = dlopen("x", 0);\n' | grep -qE "$c_calls"; then
    pass=$((pass + 1))
else
    echo "test-file-layer: FAIL: the C pattern misses a planted open/fopen or matches dlopen"
    fail=$((fail + 1))
fi

# Python: the AST check of tests/ab/test_fileio.py (TestOnlyTheLayer) reads every Python tool a
# user runs and tells a call through the layer (fileio.read_bytes, an OutDir's methods) from an
# open of its own, which a text pattern cannot; it has its own negative controls.
if python3 -m unittest -q tests.ab.test_fileio.TestOnlyTheLayer >/dev/null 2>"$result.py.log"; then
    echo "test-file-layer: Python: no open outside python/ldshim_ab/fileio.py (tests/ab/test_fileio.py)"
    pass=$((pass + 1))
else
    echo "test-file-layer: FAIL: Python code opens files outside python/ldshim_ab/fileio.py:"
    sed 's/^/  /' "$result.py.log" | tail -20
    fail=$((fail + 1))
fi
echo "$pass $fail" > "$result"
[ "$fail" -eq 0 ]
