"""Speed, memory and equivalence benchmarks of papa (run with ``python -m benchmarks.run``)."""
