"""What every judge returns (`JudgeVerdict`) and the one method a judge has (`Judge`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from glasses_rag.crag_mm.scoring.modes import JudgeStatus


class JudgeVerdict(BaseModel):
    correct: bool | None  # None: no usable verdict (counted as not correct, i.e. a hallucination)
    status: JudgeStatus = "ok"
    reason: str = ""
    raw: str | None = None


@runtime_checkable
class Judge(Protocol):
    name: str

    def judge(self, query: str, ground_truth: str, response: str) -> JudgeVerdict: ...
