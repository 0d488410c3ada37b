"""call_order.py — the order in which bench_moe.py calls its interleaved peers.

A call's time depends on the call that ran just before it (by a few percent: what the previous
kernel leaves in L2, its tail, the power it drew). A Williams design balances that by
construction: over one cycle (n repetitions for an even number n of peers, 2n for an odd one)
every peer runs right after every other peer equally often, and in every position equally
often, so no seed can give one peer an unlucky set of predecessors. Measured against the random
orders it replaced, one code's spread in one run did not shrink (doc/moe.md, "How precise a run
is"): what is left of it is not the predecessor. The seed relabels the peers and shuffles the
rows within each cycle. Only the step from one repetition to the next is not balanced (one of n
steps). Pure Python; tests/moe/test_call_order.py checks the balance.
"""
import random


def williams(n):
    """The rows of a Williams design for n >= 1 treatments (0 .. n-1): n rows when n is even,
    2n when odd (the rows and their mirror images)."""
    if n < 1:
        raise ValueError("williams: n must be >= 1, got %r" % (n,))
    base, lo, hi = [0], 1, n - 1
    for j in range(1, n):
        if j % 2:
            base.append(lo)
            lo += 1
        else:
            base.append(hi)
            hi -= 1
    rows = [[(b + r) % n for b in base] for r in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def call_orders(n, reps, seed):
    """The orders of `reps` repetitions of n peers, rounded up to whole cycles of the design: a
    list of lists of peer indices."""
    if reps < 1:
        raise ValueError("call_orders: reps must be >= 1, got %r" % (reps,))
    rng = random.Random(seed)
    label = list(range(n))
    rng.shuffle(label)
    rows = williams(n)
    out = []
    while len(out) < reps:
        cycle = list(rows)
        rng.shuffle(cycle)
        out += [[label[k] for k in row] for row in cycle]
    return out
