"""The What-if computation as it was before issue 17's speed work (main at 262d3c2): the reference
the fast path is checked against (tests/whatif/test_fast_path.py). Kept verbatim but for imports;
do not optimise it — its worth is that it is the straightforward, already-reviewed computation."""
