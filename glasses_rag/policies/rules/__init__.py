"""The rule-based planner (the default policy, no weights): it reads a turn (`reading.py`), plans from the plan
table (`planner_table.yaml`, `plan.py`), calls tools by capability and answers from named answer sources
(`sources/`). See docs/planner.md."""
