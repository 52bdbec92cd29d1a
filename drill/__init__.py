"""``make drill``: the whole system under load, faults and bad input, with its invariants checked
(issue 22). ``python -m drill.run --help``; what it proves is in
docs/reliability.md."""
