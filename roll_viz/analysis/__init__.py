"""Layer 5, one module per question a page asks (local vs global, sweeps, frameworks, self-test).

Plain tables in, plain tables and tensors out: calls the pipeline, never the model. May import:
``core``, ``rewards``, ``data``. Must not import: ``lm``, ``views``, ``ui``, ``cli``, ``bench``;
never Streamlit or Plotly.
"""
