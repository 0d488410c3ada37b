#!/usr/bin/env python3
"""test_call_order.py RESULT_FILE — bench/moe/call_order.py: every cycle of the call orders is
balanced (each peer right after each other peer equally often, in each position equally often),
whatever the seed; reps round up to whole cycles; bad input is refused. No GPU, no torch.
Writes "<passed> <failed>" to RESULT_FILE; exit 1 when a check failed."""
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "moe"))
import call_order  # noqa: E402

PASSED = FAILED = 0


def check(ok, name, detail=""):
    global PASSED, FAILED
    PASSED, FAILED = PASSED + bool(ok), FAILED + (not ok)
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail and not ok else ""), flush=True)


def balance(rows, n):
    """(pairs, positions): how often each ordered pair is adjacent within a row, and how often
    each peer sits at each position."""
    pairs = collections.Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    pos = collections.Counter((p, i) for r in rows for i, p in enumerate(r))
    return pairs, pos


for n in range(1, 17):
    rows = call_order.williams(n)
    cyc = n if n % 2 == 0 else 2 * n
    check(len(rows) == cyc, "williams(%d): %d rows" % (n, cyc), "got %d" % len(rows))
    check(all(sorted(r) == list(range(n)) for r in rows), "williams(%d): every row a permutation" % n)
    if n > 1:
        pairs, pos = balance(rows, n)
        want = 1 if n % 2 == 0 else 2
        check(len(pairs) == n * (n - 1) and set(pairs.values()) == {want},
              "williams(%d): every ordered pair adjacent %d time(s)" % (n, want), str(sorted(set(pairs.values()))))
        check(set(pos.values()) == {cyc // n}, "williams(%d): every peer %d time(s) at every position" % (n, cyc // n))

for n, reps, seed in ((2, 1, 0), (9, 200, 12345), (10, 200, 7), (13, 30, 1), (4, 8, 3)):
    orders = call_order.call_orders(n, reps, seed)
    cyc = n if n % 2 == 0 else 2 * n
    check(len(orders) == -(-reps // cyc) * cyc, "call_orders(%d, %d): whole cycles" % (n, reps), str(len(orders)))
    ok = True
    for c in range(0, len(orders), cyc):
        pairs, pos = balance(orders[c:c + cyc], n)
        if n > 1 and (len(pairs) != n * (n - 1) or set(pairs.values()) != {cyc // n}
                      or len(pos) != n * n or set(pos.values()) != {cyc // n}):
            ok = False
    check(ok, "call_orders(%d, %d, seed %d): every cycle balanced" % (n, reps, seed))
check(call_order.call_orders(9, 50, 1) == call_order.call_orders(9, 50, 1), "call_orders: one seed, one sequence")
check(call_order.call_orders(9, 50, 1) != call_order.call_orders(9, 50, 2), "call_orders: another seed, another sequence")
for bad in ((0, 10), (3, 0)):
    try:
        call_order.call_orders(*bad, 1)
        check(False, "call_orders%r refused" % (bad,))
    except ValueError:
        check(True, "call_orders%r refused" % (bad,))

if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write("%d %d\n" % (PASSED, FAILED))
print("test-moe-order: %d passed, %d failed" % (PASSED, FAILED))
sys.exit(1 if FAILED else 0)
