"""Layer 1, the math core: records, masked tensor operations and the reward -> advantage pipeline.

Lives here: the frozen records passed between stages (``records``), masked statistics and scans
(``ops``), and ``pipeline/`` (post-processing, KL, estimators, dialects, policy losses).
May import: torch, numpy and the standard library only.
Must not import: anything else of roll_viz (no model, no chart, no Streamlit), so every formula is
testable on hand-built tensors.
"""
