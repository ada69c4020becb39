"""The model policy: a chat model decides each step and writes the answer over one growing transcript (`policy.py`,
`prompts.py`), its replies parsed and checked (`replies.py`) and its self-check (`verify.py`). See docs/models.md."""
