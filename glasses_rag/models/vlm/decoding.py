"""Greedy grammar-constrained decoding for the in-process backend (glasses_rag/models/vlm/transformers_local.py), with
jump-forward.

transformers' `generate()` runs one forward pass per token. In a decision most tokens are forced by the JSON schema
(`{"action":"`, `","tool":"image_search","arguments":{`, the keys, the closing brace); SGLang and vLLM write such a
forced stretch without a step per token ("jump-forward decoding"). Here, when xgrammar says the grammar allows only
one continuation (`GrammarMatcher.find_jump_forward_string`), that string, tokenized, goes into the model as a
draft together with the token just chosen: one forward pass over all of them. The draft is then verified token by
token against what plain constrained greedy decoding would choose at each position (the argmax of the masked
logits, the same operation `generate()` with xgrammar's logits processor performs), and accepted up to the first
difference, where the model's own token is taken instead and the KV cache is cut back (speculative decoding with
the grammar as the drafter). So the tokens written are the tokens plain decoding writes, whatever tokenization the
model prefers for a forced string (the retokenization boundary needs no guess: a draft that splits the string
differently from the model is simply not accepted past the split); only the number of forward passes changes.

Two more passes are saved: the prompt's logits are computed for its last position only, and when the grammar is
complete (only stop tokens allowed) the loop ends without the forward pass that would choose which stop token:
plain decoding's reply is then the same tokens plus one stop token, which decodes to no text.

The output layer (Gemma 3: 262,144 x 640, a third of a decode step on a CPU) is applied only to the tokens the
grammar allows where they are few (a key, an enum value, the digits of a number: everywhere but free text), as
`F.linear` on those rows: the same scores for those tokens, the others masked out anyway, so the same argmax.

Free text (a rationale, a search query, an answer) has no forced continuation, but a model often copies it from
the prompt (the question, a tool's result) or from what it wrote before. There the draft is the tokens that
followed the latest earlier occurrence of the last few tokens written (prompt lookup decoding, `NgramDrafter`),
verified the same way: a draft the model would not write costs one wider forward pass (about the price of a
one-token pass in bfloat16 on a CPU), never a different token in float32 (in bfloat16 a wider pass rounds
differently, and a near-tie can go the other way, as with jump-forward).

Each written token's log-probability under the distribution greedy decoding chose it from (the masked one) is
kept (`Decoded.logprobs`): the model policy reads an answer's confidence from them.

Sampling (`temperature` > 0, for rollouts that learners from outcomes consume): each token is drawn from the masked
distribution at that temperature (softmax of the allowed tokens' logits divided by it; no top-k or top-p), with a
`torch.Generator`. A draft is verified the same way: the token drawn at each draft position from that position's
row is compared with the draft's, and the draft stands up to the first difference, where the drawn token is
taken. Each token is then drawn from exactly the distribution plain sequential sampling would draw it from (the
rows of a verified prefix are the rows of that prefix), so the ids written are the ids sampled, with or without
jump-forward and prompt lookup; `Decoded.sample_logprobs` holds each one's log-probability under the distribution
it was drawn from (the masked one at the temperature; at temperature 0 the masked one, as `logprobs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class DecodeStats:
    """What one decoding did: forward passes (the prompt's included), tokens written, tokens drafted (by
    jump-forward and by prompt lookup) and how many of them the model's own choice confirmed; `looked_up` and
    `looked_up_accepted` are prompt lookup's share."""

    forwards: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    looked_up: int = 0
    looked_up_accepted: int = 0


class NgramDrafter:
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last `sizes[0]`
    tokens (else of its last `sizes[1]`, ...), at most `length` of them.

    Example:
        >>> d = NgramDrafter([5, 6, 7, 8, 9], length=2)
        >>> d.follow([1, 5, 6])
        >>> d.draft()
        [7, 8]
    """

    def __init__(self, context: list[int], length: int = 8, sizes: tuple[int, ...] = (3, 2)):
        self.length = length
        self.sizes = sizes
        self.seq: list[int] = []
        # for each n-gram size: n-gram -> the position of the token that followed its latest occurrence
        self._next: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in sizes}
        self.extend(context)
        self.reply_start = len(context)

    def follow(self, reply: list[int]) -> None:
        """Catch up with the reply written after the context so far (it only grows)."""
        self.extend(reply[len(self.seq) - self.reply_start :])

    def extend(self, tokens: list[int]) -> None:
        for tok in tokens:
            p = len(self.seq)
            for n, index in self._next.items():
                if p >= n:
                    index[tuple(self.seq[p - n : p])] = p
            self.seq.append(tok)

    def draft(self) -> list[int]:
        for n in self.sizes:
            if len(self.seq) >= n:
                p = self._next[n].get(tuple(self.seq[-n:]))
                if p is not None:
                    return self.seq[p : p + self.length]
        return []


@dataclass
class Decoded:
    tokens: list[int]  # the reply's tokens (no stop token when the grammar completed)
    finish: str  # "stop": the grammar completed or a stop token was written; "length": max_new ran out; "cancelled"
    kv_tokens: int  # tokens (prompt + reply) whose keys and values are in the cache afterwards
    stats: DecodeStats = field(default_factory=DecodeStats)
    logprobs: list[float] = field(default_factory=list)  # each token's log-probability under the grammar's mask
    # each token's log-probability under the distribution it was drawn from (the mask, at the temperature)
    sample_logprobs: list[float] = field(default_factory=list)


@dataclass
class Sampling:
    """How a decoding picks each token: the highest-scoring allowed one (temperature 0), or one drawn from the
    allowed ones' softmax at `temperature` with `generator` (None: torch's global generator)."""

    temperature: float = 0.0
    generator: Any = None

    def pick(self, logits: Any) -> tuple[int, float, float]:
        """(index of the token chosen from `logits`, its log-probability at temperature 1, its log-probability
        under the distribution it was drawn from). Masked entries are -inf."""
        import torch

        logp = torch.log_softmax(logits, dim=-1)
        if self.temperature <= 0:
            j = int(torch.argmax(logits))  # the first maximum, as generate()'s greedy search
            return j, float(logp[j]), float(logp[j])
        drawn = torch.log_softmax(logits / self.temperature, dim=-1)
        j = int(torch.multinomial(drawn.exp(), 1, generator=self.generator)[0])
        return j, float(logp[j]), float(drawn[j])


@dataclass
class OutputLayer:
    """A causal LM split at its output layer: the backbone gives hidden states, `weight` (vocab x hidden) scores
    them; `softcap` is Gemma 2's final logit soft-capping (None for Gemma 3)."""

    backbone: Any
    weight: Any
    softcap: float | None

    @classmethod
    def of(cls, model: Any) -> OutputLayer | None:
        """The split for the usual `XForCausalLM` shape (`.model` backbone, a bias-free `lm_head`); None for
        anything else, which is then called whole."""
        import torch

        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        backbone = getattr(model, "model", None)
        if not type(model).__name__.endswith("ForCausalLM") or backbone is None:
            return None
        if not isinstance(head, torch.nn.Linear) or head.bias is not None:
            return None
        return cls(backbone, head.weight, getattr(model.config, "final_logit_softcapping", None))

    def scores(self, hidden: Any, rows: Any | None = None) -> Any:
        """Float32 logits of one position's hidden state, for the token ids `rows` (all when None), computed as
        the model computes them (in its dtype, then soft-capped), then copied to float32 as generate() does."""
        import torch
        import torch.nn.functional as F

        w = self.weight if rows is None else self.weight.index_select(0, rows)
        logits = F.linear(hidden.unsqueeze(0), w)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits[0].to(dtype=torch.float32)


class GreedyGrammarDecoder:
    """Greedy decoding of one sequence under a compiled xgrammar grammar, resuming from a DynamicCache.

    The model is called as `generate()` calls it for a single unpadded sequence (input ids after the cached ones, a
    2-D attention mask of ones, position ids and cache positions), so each forward pass computes what
    generate()'s would; masking and argmax are generate()'s with xgrammar's logits processor."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        vocab_size: int,
        stop_ids: list[int],
        totals: DecodeStats | None = None,
        lookup: int = 8,
    ):
        import torch
        import xgrammar as xgr

        self.totals = totals if totals is not None else DecodeStats()  # summed over every decoding
        self.lookup = lookup  # the longest prompt-lookup draft (0: none)

        self.model = model
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = set(stop_ids)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        # the bitmask of a complete grammar: only the stop tokens (xgrammar allows all of its stop ids then)
        words = [0] * self._bitmask.shape[1]
        for t in stop_ids:
            words[t // 32] |= 1 << (t % 32)
        self._stop_only = torch.tensor([[w - (1 << 32) if w >= 1 << 31 else w for w in words]], dtype=torch.int32)
        self._drafts: dict[str, list[int]] = {}  # forced string -> its tokens (a decision repeats the same keys)
        self.head = OutputLayer.of(model)
        self._shifts = torch.arange(32, dtype=torch.int32)
        self.sampling = Sampling()  # set per decoding (decode's `sampling`)

    def _draft(self, text: str) -> list[int]:
        hit = self._drafts.get(text)
        if hit is None:
            hit = self.tokenizer.encode(text, add_special_tokens=False)
            if len(self._drafts) < 4096:
                self._drafts[text] = hit
        return hit

    def _forward(self, cache: Any, ids: list[int], start: int, keep: int) -> Any:
        """The last `keep` positions of `ids` fed at position `start`: their hidden states ([keep, hidden]) when
        the output layer is split off, else their float32 logits ([keep, vocab])."""
        import torch

        dev = self.model.device
        n = len(ids)
        pos = torch.arange(start, start + n, device=dev)
        kw = dict(
            input_ids=torch.tensor([ids], device=dev),
            attention_mask=torch.ones(1, start + n, dtype=torch.long, device=dev),
            position_ids=pos.unsqueeze(0),
            cache_position=pos,
            past_key_values=cache,
            use_cache=True,
            return_dict=True,
        )
        if self.head is not None:
            return self.head.backbone(**kw).last_hidden_state[0, -keep:, :]
        out = self.model(**kw, logits_to_keep=keep)
        # generate() copies the last position's logits to float32 before the logits processors
        return out.logits[0, -keep:, :].to(copy=True, dtype=torch.float32)

    def _allowed(self, rows: int) -> Any:
        """The token ids below `rows` that the bitmask allows, ascending."""
        bits = (self._bitmask[0].unsqueeze(1) >> self._shifts) & 1
        ids = bits.reshape(-1).nonzero().squeeze(1)
        return ids[ids < min(self.vocab_size, rows)]

    def _choose(self, matcher: Any, row: Any) -> tuple[int | None, float, float]:
        """The token decoding writes after `matcher`'s state, from that position's row (hidden state or logits):
        plain constrained greedy decoding's, or one drawn under `self.sampling`; with its log-probability under
        the grammar's mask and under the distribution it was drawn from. None when the grammar is complete (only
        stop tokens allowed: decoding ends there)."""
        import torch
        import xgrammar as xgr

        matcher.fill_next_token_bitmask(self._bitmask, 0)
        if torch.equal(self._bitmask, self._stop_only):
            return None, 0.0, 0.0
        if self.head is not None:
            rows = self.head.weight.shape[0]
            allowed = self._allowed(rows)
            if 0 < allowed.numel() <= rows // 4:  # few: score only those rows (ids ascending: the same first max)
                j, lp, drawn = self.sampling.pick(self.head.scores(row, allowed))
                return int(allowed[j]), lp, drawn
            row = self.head.scores(row)
        scores = row.unsqueeze(0)
        xgr.apply_token_bitmask_inplace(scores, self._bitmask)
        return self.sampling.pick(scores[0])

    def decode_cached(
        self,
        prefix_cache: Any,
        compiled_grammar: Any,
        prompt: list[int],
        max_new: int,
        jump_forward: bool = True,
        out: list[int] | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        sampling: Sampling | None = None,
    ) -> tuple[Decoded, int]:
        """decode() resuming from the longest prefix of `prompt` in `prefix_cache` (a PrefixCache; the cache it gives
        is where the sequence's keys and values are kept), the finished sequence's cache stored back. Returns the
        reply and the prompt tokens that came from the cache."""
        cache, n_cached = prefix_cache.lookup(prompt) if prefix_cache.max_bytes > 0 else (None, 0)
        cache = cache if cache is not None else prefix_cache.empty()
        done = self.decode(compiled_grammar, prompt, cache, n_cached, max_new, jump_forward, out, cancelled, sampling)
        prefix_cache.store((prompt + done.tokens)[: done.kv_tokens], cache)
        for f in fields(DecodeStats):
            setattr(self.totals, f.name, getattr(self.totals, f.name) + getattr(done.stats, f.name))
        return done, n_cached

    def decode(
        self,
        compiled_grammar: Any,
        prompt: list[int],
        cache: Any,
        n_cached: int,
        max_new: int,
        jump_forward: bool = True,
        out: list[int] | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        sampling: Sampling | None = None,
    ) -> Decoded:
        """Decode after `prompt`, whose first `n_cached` tokens are in `cache` (a DynamicCache holding exactly
        those). `out` (optional) is filled as tokens are chosen, so a caller interrupted mid-forward sees them.
        `sampling`: greedy when None."""
        import xgrammar as xgr

        self.sampling = sampling or Sampling()
        matcher = xgr.GrammarMatcher(compiled_grammar)
        tokens = out if out is not None else []
        logprobs: list[float] = []
        drawn: list[float] = []
        stats = DecodeStats()
        row = self._forward(cache, prompt[n_cached:], n_cached, 1)[0]
        stats.forwards += 1
        kv = len(prompt)
        lookup = NgramDrafter(prompt, self.lookup) if jump_forward and self.lookup > 0 else None
        pending: tuple[int | None, float, float] | None = None  # a choice already made from `row` (a refused draft)
        finish = "length"
        while len(tokens) < max_new:
            if cancelled():
                finish = "cancelled"
                break
            tok, lp, dlp = pending if pending is not None else self._choose(matcher, row)
            pending = None
            if tok is None:
                finish = "stop"
                break
            tokens.append(tok)
            logprobs.append(lp)
            drawn.append(dlp)
            if not matcher.accept_token(tok):  # cannot happen: the token was allowed by the mask
                raise RuntimeError(f"the grammar refused token {tok} that its own mask allowed")
            if tok in self.stop_ids:
                finish = "stop"
                break
            if len(tokens) >= max_new:
                break
            lps = (logprobs, drawn)
            row, pending, kv = self._step(matcher, lookup, cache, tokens, kv, max_new, jump_forward, stats, lps)
        stats.tokens = len(tokens)
        return Decoded(
            tokens=tokens, finish=finish, kv_tokens=kv, stats=stats, logprobs=logprobs, sample_logprobs=drawn
        )

    def _step(
        self,
        matcher: Any,
        lookup: NgramDrafter | None,
        cache: Any,
        tokens: list[int],
        kv: int,
        max_new: int,
        jump_forward: bool,
        stats: DecodeStats,
        lps: tuple[list[float], list[float]],
    ) -> tuple[Any, Any, int]:
        """One forward pass over the token just chosen (`tokens[-1]`) and a draft to verify after it: the next row
        of logits, a choice already made from it (a refused draft's), and the cache's new length."""
        draft, looked_up = self._draft_after(matcher, lookup, tokens, max_new) if jump_forward else ([], False)
        feed = [tokens[-1]] + draft
        many = self._forward(cache, feed, kv, len(feed))
        stats.forwards += 1
        kv += len(feed)
        i, pending = self._confirm(matcher, draft, many, tokens, lps)
        stats.drafted += len(draft)
        stats.accepted += i
        if looked_up:
            stats.looked_up += len(draft)
            stats.looked_up_accepted += i
        if i < len(draft):
            kv -= len(draft) - i
            cache.crop(kv)  # the unconfirmed draft tokens leave the cache
        return many[i], pending, kv

    def _draft_after(
        self, matcher: Any, lookup: NgramDrafter | None, tokens: list[int], max_new: int
    ) -> tuple[list[int], bool]:
        """The draft to verify after `tokens`: the grammar's forced continuation, else (free text) prompt lookup's;
        and whether it came from prompt lookup. Never a stop token: decoding ends at one."""
        room = max_new - len(tokens)
        forced = matcher.find_jump_forward_string()
        if forced:
            return self._draft(forced)[:room], False
        if lookup is None:
            return [], False
        lookup.follow(tokens)
        draft = lookup.draft()[:room]
        cut = next((j for j, t in enumerate(draft) if t in self.stop_ids), len(draft))
        return draft[:cut], True

    def _confirm(
        self, matcher: Any, draft: list[int], rows: Any, tokens: list[int], logprobs: tuple[list[float], list[float]]
    ) -> tuple[int, tuple[int | None, float, float] | None]:
        """How many of `draft`'s tokens stand: each where decoding would have chosen (greedy) or drawn (sampling)
        the same token from its position's row; those are written (to `tokens`, `logprobs`' two lists and the
        matcher). Also the choice made at the first refused position (decoding's next token there), so it is
        neither computed nor drawn twice."""
        i = 0
        while i < len(draft):
            choice = self._choose(matcher, rows[i])
            if choice[0] != draft[i]:
                return i, choice
            tokens.append(draft[i])
            logprobs[0].append(choice[1])
            logprobs[1].append(choice[2])
            matcher.accept_token(draft[i])
            i += 1
        return i, None


__all__ = ["DecodeStats", "Decoded", "GreedyGrammarDecoder", "NgramDrafter", "OutputLayer", "Sampling"]
