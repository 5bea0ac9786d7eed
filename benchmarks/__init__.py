"""Benchmarks: `python -m benchmarks` is the side-by-side suite; each other module also runs on its own."""
