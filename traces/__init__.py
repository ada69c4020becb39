"""Per-turn JSON traces: the pydantic schema (traces/schema.py, exported to traces/turn_trace.schema.json),
the atomic store (traces/store.py), the stored model requests, the HTML viewer and the run diff. SuperGlasses logs
and comparison live in glasses_rag/superglasses/, CRAG-MM rescoring in glasses_rag/crag_mm/rescore.py.

Submodules are not imported here, so `python -m traces.<module>` runs cleanly.
"""
