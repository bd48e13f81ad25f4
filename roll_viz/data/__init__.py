"""Layer 4, batches that come from somewhere: committed presets, recorded runs, imported dumps.

May import: ``roll_viz.core``, ``roll_viz.rewards``, ``roll_viz.lm`` (a preset knows how it was
sampled). Must not import: ``analysis``, ``views``, ``ui``, ``cli``, ``bench``; never Streamlit or
Plotly. Nothing read from a file is executed or unpickled.
"""
