"""Layer 3, the language model: loading, seeded sampling, teacher-forced scoring, LoRA updates.

May import: ``roll_viz.core`` and ``roll_viz.rewards`` (a training step scores its own samples).
Must not import: ``data``, ``analysis``, ``views``, ``ui``, ``cli``, ``bench``; never Streamlit
or Plotly. The shared base weights are never mutated here: per-user state is an adapter.
"""
