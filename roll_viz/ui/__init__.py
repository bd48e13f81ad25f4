"""Layer 7, the Streamlit layer (the only package code that imports streamlit).

May import every layer below. Must not import ``cli`` or ``bench``.
"""

from roll_viz.ui._all import *  # noqa: F403
