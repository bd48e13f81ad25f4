"""Multi-turn, tool-using episodes: the transcript record, its loss masks and credit per turn.

Pure Python and torch, like the rest of ``core``: ``episode`` (the records), ``masks`` (which
tokens get gradient, and the known mistakes), ``extension`` (token-exact histories),
``credit`` (advantage per turn and per token). The ATIF reader lives in
``roll_viz.data.runs.atif`` (data layer: it opens files).

API (what the lm and ui layers call; B episodes, T tokens of the longest transcript):

``masks``
    ``batch_episodes(episodes, pad_id=0, unit="token") -> TranscriptBatch``: the (B, T) view:
    ``token_ids``, ``role`` (index into ``ROLES``, -1 on padding), ``turn`` (-1 the prompt, -2
    padding), ``segment``, ``sampled``, ``valid``, ``logprobs`` (NaN where none); ``unit=
    "segment"`` makes each segment one position (ATIF files without token ids).
    ``MASK_RULES``: name -> ``MaskRule(name, label, source, what, fn)``; names ``correct``,
    ``tool_trained``, ``history_trained``, ``last_turn_only``, ``pad_is_eos``,
    ``tool_mask_misaligned``, ``mask_as_attention``.
    ``rule_mask(batch, name, eos_id=None, reencode=None) -> Tensor`` (B, T) bool.
    ``rule_effects(batch, advantages, logprobs=None, eos_id=None, reencode=None)
    -> dict[name, RuleEffect]`` (mask, added/removed vs correct, loss, gradient per token,
    broken causal context).
    ``pg_loss(logprobs, advantages, mask)``, ``grad_coefficients(advantages, mask)``: the
    token-mean policy-gradient loss and its closed-form d loss / d log-prob.
    ``attention_breaks(batch, mask) -> Tensor``: positions whose context loses tokens when the
    loss mask is used as the attention mask.

``extension``
    ``strip_think(text) -> str``; ``check_extension(episode, reencode, transform=strip_think)
    -> ExtensionReport`` (re-encoded history vs the sampled tokens, differing positions).
    ``per_turn_samples(episode) -> tuple[Episode, ...]``: one sample per turn, earlier turns
    as prompt (the layout of NeMo RL #2176).

``credit``
    ``CREDIT_RULES``: name -> ``CreditRule(name, label, source, formula, fn)``; names
    ``outcome_broadcast``, ``episode_grpo``, ``turn_returns``, ``turn_gae``, ``gigpo``,
    ``mt_grpo``, ``progress_deltas``, ``turn_index_sum`` (the verl #7244 construction).
    ``credit(name, episodes, params=CreditParams(), pad_id=0, unit="token") -> Credit``
    (per-turn advantages per episode, per-token (B, T) advantages aligned with
    ``batch_episodes``, the formula and the formula with numbers). ``turn_rewards(episode)``.
    ``turn_index_bias(stop_probs, turn_reward, outcome) -> TurnIndexBias``: the verl #7244
    bias per extra turn, exact; ``turn_index_demo(counts, turn_reward, outcome)``: episodes
    that show it on tokens.

``roll_viz.data.runs.atif``
    ``read_atif(path, tokenize=None) -> AtifRead`` (episodes, per-step problems, notes,
    whether token ids were in the file); ``is_atif(path) -> bool``.
"""
