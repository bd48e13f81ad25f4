"""Benchmarks, ``python -m benchmarks [--sampling|--classroom|...]``: timings as JSON lines.

Speed is measured here, never asserted in tests; each line times a peer in the same run.
May import every layer except ``ui`` (the browser benchmarks start ``streamlit run`` as a
subprocess rather than importing it).
"""
