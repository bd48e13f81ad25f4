"""Layer 6, what the pages draw: Plotly figures, token chips and formula tables.

Functions take records or tables and return ``go.Figure`` / strings / DataFrames; they never call
Streamlit and never compute pipeline math. May import: ``core``, ``rewards``, ``data``,
``analysis``. Must not import: ``lm``, ``ui``, ``cli``, ``bench``; never Streamlit.
"""
