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
# after ld_file_check_regular: shim/driver.c); mkdtemp (a new private directory, never an
# existing name) and open_memstream (memory, no file) are not file opens.
#
# Python: tools/ldshim-ab and python/ldshim_ab/*.py, for open( io.open( os.open( os.mkdir(
# os.makedirs( tempfile.*( and pathlib's .open( .write_text( .write_bytes( .read_text(
# .read_bytes(, outside python/ldshim_ab/fileio.py. Checked once that layer exists on the
# branch; until then the Python part says it is skipped.
#
# A comment line is skipped (C lines starting with /*, *, //; Python lines starting with #).
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

py_layer=python/ldshim_ab/fileio.py
py_calls='(^|[^A-Za-z0-9_])(open|io\.open|os\.open|os\.mkdir|os\.makedirs|os\.mkfifo|tempfile\.[a-zA-Z_]+)[[:space:]]*\(|\.(open|write_text|write_bytes|read_text|read_bytes)[[:space:]]*\('
if [ -f "$py_layer" ]; then
    py_files=$(ls tools/ldshim-ab python/ldshim_ab/*.py 2>/dev/null | grep -v "^$py_layer\$")
    hits=$(for f in $py_files; do
             grep -nE "$py_calls" "$f" | grep -vE '^[0-9]+:[[:space:]]*#' | sed "s|^|$f:|"
           done)
    if [ -n "$hits" ]; then
        echo "test-file-layer: FAIL: Python code opens files outside $py_layer:"
        echo "$hits" | sed 's/^/  /'
        fail=$((fail + 1))
    else
        echo "test-file-layer: Python: $(echo "$py_files" | wc -w) files, no open outside $py_layer"
        pass=$((pass + 1))
    fi
else
    echo "test-file-layer: Python: skipped: $py_layer (the Python file layer) is not on this branch"
fi
echo "$pass $fail" > "$result"
[ "$fail" -eq 0 ]
