"""The trace record: per-turn JSON traces, their pydantic schema (traces/schema.py, exported to
traces/turn_trace.schema.json), the atomic store (traces/store.py) and the stored model requests. The HTML viewer and
the run diff are front ends (glasses_rag/frontends/); SuperGlasses logs and comparison live in
glasses_rag/superglasses/, CRAG-MM rescoring in glasses_rag/crag_mm/rescore.py.

Submodules are not imported here, so `python -m traces.<module>` runs cleanly.
"""
