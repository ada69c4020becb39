"""Per-turn JSON traces: the pydantic schema (traces/schema.py, exported to traces/turn_trace.schema.json),
the atomic store (traces/store.py), SuperGlasses export/compare and the HTML viewer.

Submodules are not imported here, so `python -m traces.<module>` runs cleanly.
"""
