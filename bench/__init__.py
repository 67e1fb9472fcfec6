"""Request-counting benchmarks on the local runtime (``python -m bench``)."""
