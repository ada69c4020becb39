"""The two scoring modes, one per official evaluation code, and the constants they share."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import Literal

MAX_RESPONSE_LENGTH_IN_TOKENS = 75
MAX_EVAL_TOKENS = 1024
# The judge's sampling when its mode sets none: OpenAI's API defaults, which are also vLLM's neutral values
# (top_k 0 = off; top_k, min_p and repetition_penalty are not OpenAI's and are dropped after it rejects them)
JUDGE_SAMPLING = {
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}
MAX_API_RETRIES = 3
PROMPTS_DIR = files("prompts")  # package data: the judges' prompts wherever the project is installed

TurnResult = Literal["correct", "missing", "incorrect"]
Mode = Literal["kddcup2025", "crag-mm-release"]
IdkRule = Literal["kddcup2025", "crag-mm-release"]
JudgeStatus = Literal["ok", "error", "unparseable", "no-verdict"]


@dataclass(frozen=True)
class ScoringMode:
    """Everything that differs between the two official evaluation codes."""

    name: str
    reproduces: str  # the official code, file and commit
    idk_rule: IdkRule
    counts_after_early_stop: bool  # True: counts come after the multi-turn early stop
    single_turn_guard: bool  # truthfulness = 0.0 when total <= 1 (both codes: `if total > 1 else 0.0`)
    judge_model: str  # the official default judge model
    judge_system_prompt: str  # file name under prompts/
    judge_user_prompt: str
    judge_structured: bool  # response_format JSON schema {"accuracy": bool}
    judge_temperature: float | None  # None: not sent (API default), as officially
    judge_max_tokens: int | None
    judge_attempts_on_bad_reply: int  # how often an unparseable reply is asked again (official outer loop)
    unparseable_verdict: str  # what the official code does with an unparseable verdict


MODES: dict[str, ScoringMode] = {
    "kddcup2025": ScoringMode(
        name="kddcup2025",
        reproduces="KDD Cup 2025 starter kit local_evaluation.py @ 6e1acbee (AIcrowd "
        "meta-comprehensive-rag-benchmark-starter-kit)",
        idk_rule="kddcup2025",
        counts_after_early_stop=True,
        single_turn_guard=True,
        judge_model="gpt-4o-mini",
        judge_system_prompt="judge_kddcup2025_system.txt",
        judge_user_prompt="judge_kddcup2025_user.txt",
        judge_structured=True,
        judge_temperature=None,
        judge_max_tokens=None,
        judge_attempts_on_bad_reply=MAX_API_RETRIES,
        unparseable_verdict="the structured-output parse raises, the call is retried (3 attempts in all), "
        "then no verdict: counted as a hallucination",
    ),
    "crag-mm-release": ScoringMode(
        name="crag-mm-release",
        reproduces="facebookresearch/CRAG-MM evaluation/{evaluator,evaluation_utils,llm_judge}.py @ 36b6b4bc",
        idk_rule="crag-mm-release",
        counts_after_early_stop=False,
        single_turn_guard=True,
        judge_model="gpt-4o",
        judge_system_prompt="judge_crag_mm_release_system.txt",
        judge_user_prompt="judge_crag_mm_release_user.txt",
        judge_structured=False,
        judge_temperature=0.0,
        judge_max_tokens=MAX_EVAL_TOKENS,
        judge_attempts_on_bad_reply=1,
        unparseable_verdict="accuracy=None; the official calculate_scores then crashes with TypeError "
        "(~None in the early stop); counted here as not correct (a hallucination, as its "
        ".sum() counts it)",
    ),
}
DEFAULT_MODE: Mode = "kddcup2025"


def get_mode(mode: str | ScoringMode | None = None) -> ScoringMode:
    if isinstance(mode, ScoringMode):
        return mode
    name = mode or DEFAULT_MODE
    if name not in MODES:
        raise ValueError(f"unknown scoring mode {name!r}; choose one of {', '.join(MODES)}")
    return MODES[name]
