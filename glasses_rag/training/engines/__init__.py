"""RL on existing engines: the agent's turn as an engine's rollout, its decisions in token ids, its CRAG-MM score as
the reward.

- `turns.py`: what every engine consumes, one record per decision (`DecisionRecord`: the model's `SampledTokens`
  and the turn's reward), the turn run and scored as the evaluation runs it, and the decisions packed into one
  token sequence where each prompt continues the one before (`pack`).
- `verl_loop.py`: a verl `AgentLoopBase` (verl 0.9; its own environment: transformers >= 5.5).
- `agent_lightning.py`: an Agent Lightning 1.0 rollout runner (its gateway records the token ids).

Neither engine is a dependency of the project: `pip install '.[verl]'` / `'.[agent-lightning]'` in the engine's
environment (docs/training.md, "RL engines").
"""
