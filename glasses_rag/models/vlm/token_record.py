"""The token record of an in-process reply (`glasses_rag.models.vlm.base.SampledTokens`): the prompt's ids, the ids the
model produced and their log-probabilities, for learners from outcomes (glasses_rag/training/rollouts.py), and the
seeds that make a sampled reply reproducible.

A sampled request draws from a `torch.Generator` seeded by the backend's seed and the prompt's token ids (as a
server's per-request `seed` does): the same prompt with the same seed gives the same reply whatever ran before it,
and another seed (the next rollout) another draw.
"""

from __future__ import annotations

import hashlib
from typing import Any

from glasses_rag.models.vlm.base import SampledTokens, TokenLogprob


def request_seed(seed: int, prompt_ids: list[int]) -> int:
    """A 63-bit seed from the backend's `seed` and the prompt's ids.

    Example:
        >>> request_seed(0, [1, 2, 3]) == request_seed(0, [1, 2, 3]) != request_seed(1, [1, 2, 3])
        True
    """
    h = hashlib.blake2b(digest_size=8)
    h.update(str(int(seed)).encode())
    h.update(b"|" + b",".join(str(i).encode() for i in prompt_ids))
    return int.from_bytes(h.digest(), "big") >> 1


def generator_for(seed: int | None, prompt_ids: list[int]) -> Any:
    """A CPU `torch.Generator` for one sampled request (None without a seed: torch's global one)."""
    if seed is None:
        return None
    import torch

    return torch.Generator().manual_seed(request_seed(seed, prompt_ids))


def generated_record(prompt_ids: list[int], new: Any, steps: Any, masked: bool) -> SampledTokens:
    """The record of a generate() reply: `new` the ids it wrote, `steps` its per-step scores (the processed ones,
    mask and temperature applied, when `masked`; else its raw logits), each id's log-probability under them."""
    import torch

    ids = [int(t) for t in new]
    logprobs = [float(torch.log_softmax(steps[i][0].float(), dim=-1)[t]) for i, t in enumerate(ids) if i < len(steps)]
    return SampledTokens(
        prompt_ids=list(prompt_ids),
        completion_ids=ids[: len(logprobs)],
        logprobs=logprobs,
        logprob_source="masked" if masked else "raw",
    )


def token_logprobs(tokenizer: Any, tokens: list[int], logprobs: list[float]) -> list[TokenLogprob]:
    """Each token's text (what it adds to the decoded text so far, so the texts join to the whole reply's) with
    its log-probability."""
    out, before = [], ""
    for i, lp in enumerate(logprobs):
        text = tokenizer.decode(tokens[: i + 1], skip_special_tokens=True)
        out.append(TokenLogprob(token=text[len(before) :], logprob=lp))
        before = text
    return out


__all__ = ["generated_record", "generator_for", "request_seed", "token_logprobs"]
