"""The policies, one family: what decides each step of a turn and writes its answer. The protocol (`protocol.py`),
the rule-based planner (`rules/`), the model policy (`model/`), the presets' published designs (`presets/`) and the
heuristic self-check (`self_check.py`)."""
