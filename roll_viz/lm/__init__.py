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
steps) and ``train`` (the loop). The rollout engines (``engine``: the token-level interface and
the in-process reference; ``engine_http``: a vLLM server; ``engine_sync``: adapters on it;
``engine_rollout``: a Rollout from an engine; ``engine_check``: engine vs in-process;
``engine_server``: starting one) and the behaviour samplers (``behaviour``, ``behaviour_sampler``)
sit beside them.

One door for the pages: ``rollout`` (``current(spec, bundle).sample(Request) -> Rollout``) owns
which engine answers (the operator's environment, a probe, the in-process fallback) and offers the
sampling side's names; ``ui`` and the pages import only ``rollout``, ``models``, ``lora``,
``update``, ``train`` and ``runfile`` (``tests/test_layers.py``).
"""
