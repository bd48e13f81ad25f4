"""Layer 3, the language model: loading, seeded sampling, teacher-forced scoring, LoRA updates.

May import: ``roll_viz.core`` and ``roll_viz.rewards`` (a training step scores its own samples).
Must not import: ``data``, ``analysis``, ``views``, ``ui``, ``cli``, ``bench``; never Streamlit
or Plotly. The shared base weights are never mutated here: per-user state is an adapter.

One noun per module, each importing only those before it: ``threads`` (every thread decision),
``models`` (``load_models``, ``ModelBundle``), ``request`` (``SamplingConfig``, policy sources),
``lean_step`` and ``decode`` (the decode loop), ``scoring`` (teacher-forced passes and token
scores), ``serving`` (queue, progress, estimates: the one module that knows several users share
the model), ``sampling`` (``sample``, single flight), ``reaper`` (freeing a user's state off the
request path, ``malloc_trim``), ``lora`` and ``update`` (one policy update through a per-user
adapter), ``runfile`` (a run's settings and records), ``step_queue`` (fair turns for training
steps) and ``train`` (the loop).
"""
