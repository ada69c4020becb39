"""Per-turn JSON traces: the pydantic schema (exported to traces/turn_trace.schema.json) and an atomic writer."""

from traces.schema import TraceHit, Step, StepError, TurnTrace
from traces.store import TraceStore, write_json_atomic

__all__ = ["Step", "StepError", "TraceHit", "TraceStore", "TurnTrace", "write_json_atomic"]
