"""The replies of an in-process model (glasses_rag/models/vlm/transformers_local.py): of the grammar decoder, of
generate(), and of a generation its turn's end interrupted; each finished one with its token record
(`ChatReply.sampled`: the prompt's ids, the ids written and their log-probabilities).
"""

from __future__ import annotations

import time
from typing import Any

from glasses_rag.core.types import DecisionMode
from glasses_rag.models.vlm.base import ChatReply, ReplyCancelled, SampledTokens, Usage
from glasses_rag.models.vlm.decoding import Decoded
from glasses_rag.models.vlm.token_record import generated_record, token_logprobs


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def decoded_reply(
    tokenizer: Any, name: str, decoded: Decoded, prompt_ids: list[int], t0: float, mode: DecisionMode | None
) -> ChatReply:
    """The reply of the grammar decoder (glasses_rag/models/vlm/decoding.py), with each token's log-probability
    under the grammar's mask and the ids as drawn."""
    return ChatReply(
        text=tokenizer.decode(decoded.tokens, skip_special_tokens=True).strip(),
        usage=Usage(input_tokens=len(prompt_ids), output_tokens=len(decoded.tokens)),
        finish_reason=decoded.finish,
        latency_ms=_ms_since(t0),
        model=name,
        mode=mode,
        logprobs=token_logprobs(tokenizer, decoded.tokens, decoded.logprobs),
        logprobs_from="masked",
        sampled=SampledTokens(
            prompt_ids=prompt_ids,
            completion_ids=list(decoded.tokens),
            logprobs=decoded.sample_logprobs,
            logprob_source="masked",
        ),
    )


def generated_reply(
    tokenizer: Any,
    name: str,
    out: Any,
    prompt_ids: list[int],
    gen: dict,
    t0: float,
    mode: DecisionMode | None,
    constrained: bool,
) -> ChatReply:
    """The reply of a finished generate(). "stop" when it ended on a stop token (for a schema: the grammar was
    complete) or before max_tokens; "length" when max_tokens cut it (a constrained reply is then unfinished
    JSON, and the caller records it as unusable)."""
    n_in, max_tokens = len(prompt_ids), gen["max_new_tokens"]
    new = out.sequences[0, n_in:]
    stops = gen.get("eos_token_id") or [tokenizer.eos_token_id]
    n_out = int(new.shape[0])
    ended = bool(n_out) and int(new[-1]) in stops
    return ChatReply(
        text=tokenizer.decode(new, skip_special_tokens=True).strip(),
        usage=Usage(input_tokens=n_in, output_tokens=n_out),
        finish_reason="stop" if ended or n_out < max_tokens else "length",
        latency_ms=_ms_since(t0),
        model=name,
        mode=mode,
        sampled=generated_record(prompt_ids, new, out.scores if constrained else out.logits, constrained),
    )


def interrupted(
    tokenizer: Any, name: str, done: list[int] | None, prompt_ids: list[int], t0: float, mode: DecisionMode | None
) -> ReplyCancelled:
    """The cancellation of a generation stopped mid-forward, with what it had written (`done`; None when it
    stopped in the prompt's prefill)."""
    where = "during generation" if done is not None else "during the prompt's prefill"
    return ReplyCancelled(
        f"the turn ended {where}",
        ChatReply(
            text=tokenizer.decode(done, skip_special_tokens=True).strip() if done is not None else "",
            usage=Usage(input_tokens=len(prompt_ids), output_tokens=len(done) if done is not None else None),
            finish_reason="cancelled",
            latency_ms=_ms_since(t0),
            model=name,
            mode=mode,
            prompt_ids=prompt_ids,
        ),
    )
