#!/bin/sh
# summarize.sh RESULTS_DIR SUITE... — add up "<passed> <failed>" from each suite's result file
# and print one closing line. A suite that wrote no result counts as one failure.
dir=$1; shift
p=0; f=0
for s in "$@"; do
  if [ -r "$dir/$s" ]; then
    read sp sf < "$dir/$s"
    p=$((p + sp)); f=$((f + sf))
    [ "$sf" -eq 0 ] || echo "suite $s: $sf failed"
  else
    echo "suite $s: wrote no result (crashed or did not run)"
    f=$((f + 1))
  fi
done
echo "total: $p passed, $f failed"
[ "$f" -eq 0 ]
