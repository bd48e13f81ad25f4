"""Command-line entry points behind ``python -m roll_viz``: compute, sample (and more).

May import every layer except ``views`` and ``ui`` (the CLI never draws and never needs Streamlit).
"""
