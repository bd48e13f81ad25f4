"""Test page for the instant component: a fixed synthetic batch, no model.

Query parameters: fw (framework, default roll), est (estimator), kl=1 (KL in the reward),
uncovered=1 (adds a config key the browser pipeline does not know, to show the server fallback),
P / G / T (batch size), knobs (comma list of controls), view (first heatmap). On release the
settled values are written to the URL and the Python pipeline's result is printed as JSON in the
container ``py_result``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
import torch  # noqa: E402

from roll_viz.core.pipeline import ESTIMATOR_KEY, run  # noqa: E402
from roll_viz.core.records import Batch  # noqa: E402
from roll_viz.ui import instant  # noqa: E402


@st.cache_data
def make_batch(P: int, G: int, T: int) -> Batch:
    gen = torch.Generator().manual_seed(0)
    B = P * G
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[1] = 0  # a zero-length response
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    scores = torch.randint(0, 2, (B,), generator=gen).to(torch.float64)  # ties
    scores[G : 2 * G] = torch.rand(G, generator=gen, dtype=torch.float64) * 4 - 2
    return Batch(
        scores=scores,
        response_mask=mask,
        group_ids=torch.arange(P).repeat_interleave(G),
        group_labels=tuple(f"<b>prompt {p}</b>" for p in range(P)),  # must show escaped
        logprobs=-torch.rand(B, T, generator=gen, dtype=torch.float64) * 3,
        ref_logprobs=-torch.rand(B, T, generator=gen, dtype=torch.float64) * 3,
        values=torch.rand(B, T, generator=gen, dtype=torch.float64),
    )


q = st.query_params
fw = q.get("fw", "roll")
P, G, T = int(q.get("P", 4)), int(q.get("G", 4)), int(q.get("T", 48))
config = {ESTIMATOR_KEY[fw]: q.get("est", "grpo" if fw in ("roll", "verl") else None)}
config = {k: v for k, v in config.items() if v is not None}
if q.get("kl") == "1":
    config |= {
        "roll": {"add_token_level_kl": True},
        "verl": {"use_kl_in_reward": True},
    }.get(fw, {})
batch = make_batch(P, G, T)
payload = instant.instant_payload(batch, fw, config)
if q.get("uncovered") == "1":
    payload["config"]["future_knob"] = 1.0
st.write(f"payload bytes: {len(json.dumps(payload))}")

initial = {k: float(q[k]) for k in ("beta", "gamma", "lam") if k in q}
knobs = tuple(q.get("knobs", ",".join(instant.KNOBS)).split(","))
settled = instant.instant_advantages(
    payload, params=initial, key="adv_instant", knobs=knobs, view=q.get("view", "advantages")
)
if settled:
    for k in ("beta", "gamma", "lam", "G"):
        if settled.get(k) is not None:
            st.query_params[k] = str(settled[k])
    cfg = instant.apply_params(fw, config, settled)
    trace = run(instant.subset_groups(batch, int(settled["G"])), fw, cfg)
    with st.container(key="py_result"):
        st.code(
            json.dumps(
                {
                    "settled": {k: settled.get(k) for k in ("beta", "gamma", "lam", "G")},
                    "estimator": cfg[ESTIMATOR_KEY[fw]],
                    "advantages": trace.advantages.tolist(),
                    "rewards": trace.rewards.tolist(),
                }
            ),
            language=None,
        )
