"""What a preset file says, validated: which policy, which tools in which order, which routers, answer rules,
verification and thresholds, each step citing the paper section it follows.

A preset is data (glasses_rag/policies/presets/<name>.yaml, or any YAML file of this shape);
glasses_rag/policies/presets/pipeline.py runs the
steps of a `pipeline` preset, the model loop and the rule planner run the two others.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PolicyKind = Literal["pipeline", "model-loop", "rule"]
# A step's conditions, evaluated at every decision from the turn's state and its routing:
#   has_image: the turn has a usable image; retrieve: the routing asked for retrieval (true without a router);
#   image_branch / text_branch: the search router asked for image / text search (true without one);
#   evidence / web_evidence: something (a web page) was retrieved so far.
Condition = Literal["has_image", "retrieve", "image_branch", "text_branch", "evidence", "web_evidence"]
RouteName = Literal["superlens-demand", "superlens-search", "unsw-route", "unsw-summary", "eurecom-expand"]
VerificationMode = Literal[
    "none", "evidence-support", "model-single", "model-dual-cove", "unsw-algorithm-1", "idk-variants"
]
# Argument values a step may reference (anything else is passed as written):
#   $question; $sub_question (with for_each_sub_question); $object (what the search router named, else the phrase
#   the question points at); $expanded (the question plus the routing's image summary or query expansion);
#   $entity (the top image match, else the conversation's entity).
SLOTS = ("$question", "$sub_question", "$object", "$expanded", "$entity")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Step(_Strict):
    """One step: a routing decision made by the policy (`route`), or a call of one tool (`tools`: alternatives in
    order of preference; the first one the run allows is called, e.g. google_lens on SuperGlasses, image_search on
    CRAG-MM)."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    module: str = Field(description="The module's name in the ablation table (SuperLens Table 4 style).")
    follows: str = Field(description="The paper section / figure / equation this step follows.")
    route: RouteName | None = None
    tools: list[str] = Field(default_factory=list)
    when: list[Condition] = Field(default_factory=list, description="All must hold for the step to run.")
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Tool arguments; $slots are filled per turn. "
        "An argument the chosen tool does not take is left out.",
    )
    for_each_sub_question: bool = Field(
        False, description="One call per sub-question (the question itself when there are none), run together."
    )
    max_calls: int = Field(4, ge=1, le=16, description="At most this many calls for for_each_sub_question.")
    with_previous: bool = Field(False, description="Runs in the same round as the step before it (independent).")
    if_removed: dict[str, Any] = Field(
        default_factory=dict,
        description="A route step switched off (ablation) "
        "decides this instead, e.g. {retrieve: true} = mandatory retrieval.",
    )
    device: str | None = Field(
        None,
        pattern=r"^(cpu|mps|cuda(:\d+)?)$",
        description="The device the step's model runs on (the reranker's: cpu, cuda, cuda:1, mps); "
        "--reranker-device overrides it; none: the model backend's.",
    )

    @field_validator("route", mode="before")
    @classmethod
    def _known_route(cls, v: Any) -> Any:
        import difflib

        known = get_args(RouteName)
        if v is None or v in known:
            return v
        near = difflib.get_close_matches(str(v), known, n=1, cutoff=0.5)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"unknown router {v!r}{hint}; routers: {', '.join(known)}")

    @model_validator(mode="after")
    def _route_or_tools(self) -> Step:
        if (self.route is not None) == bool(self.tools):
            raise ValueError(f"step {self.id!r}: give either `route` or `tools`, not both or neither")
        if self.route is not None and (self.args or self.for_each_sub_question):
            raise ValueError(f"step {self.id!r}: a route step takes no tool arguments")
        bad = [v for v in self.args.values() if isinstance(v, str) and v.startswith("$") and v not in SLOTS]
        if bad:
            raise ValueError(f"step {self.id!r}: unknown slot(s) {bad}; known: {', '.join(SLOTS)}")
        if "$sub_question" in self.args.values() and not self.for_each_sub_question:
            raise ValueError(f"step {self.id!r}: $sub_question needs for_each_sub_question: true")
        if self.device is not None and "reranker" not in self.tools:
            raise ValueError(f"step {self.id!r}: `device` is the reranker's; this step does not call it")
        return self


class TaskBudget(_Strict):
    """A task's own budgets (e.g. EURECOM §2.4: Task 1 gives all 5,000 evidence tokens to image chunks)."""

    follows: str
    image_tokens: int | None = Field(None, ge=0, le=200_000)
    web_tokens: int | None = Field(None, ge=0, le=200_000)
    max_items: int | None = Field(None, ge=1, le=1000)


class ContextSpec(_Strict):
    """What the answer model reads (glasses_rag/policies/presets/context.py): the reranker's kept list, within token
    budgets."""

    follows: str
    reranked_only: bool = Field(
        True,
        description="When the reranker ran, its kept list is the whole context; the "
        "searches before it are shown by their count only.",
    )
    image_tokens: int | None = Field(None, ge=1, le=200_000, description="Tokens of image-search content, at most.")
    web_tokens: int | None = Field(None, ge=1, le=200_000, description="Tokens of web content, at most.")
    item_tokens: int | None = Field(None, ge=1, le=100_000, description="Tokens of one item, at most (a chunk).")
    max_items: int | None = Field(None, ge=1, le=1000, description="Items in the context, at most.")
    tasks: dict[Annotated[int, Field(ge=1, le=3)], TaskBudget] = Field(
        default_factory=dict, description="Budgets of one task instead of the ones above (those it names)."
    )

    def for_task(self, task: int) -> ContextSpec:
        """The budgets that hold on `task`."""
        own = self.tasks.get(task)
        if own is None:
            return self
        changed = own.model_dump(exclude={"follows"}, exclude_none=True)
        return self.model_copy(update=changed)


class AnswerSpec(_Strict):
    """How the final answer is written (a model answers with the retrieved context in its prompt)."""

    follows: str
    prompt: str | None = Field(
        None,
        pattern=r"^[a-z0-9_]+$",
        description="With a model: the request file (prompts/<prompt>.yaml) whose `answer` request is sent, in "
        "the paper's shape (glasses_rag/policies/presets/requests.py); none: the model policy's answer request over "
        "the turn's transcript.",
    )
    min_image_score: float | None = Field(
        None, ge=0, le=1, description="Image-search hits under this similarity are left out of the answer's context."
    )
    realtime_min_retrieval: float | None = Field(
        None,
        ge=0,
        le=1,
        description="When the router calls the question "
        "real-time and no evidence scores this much, answer 'I don't know'.",
    )
    context: ContextSpec | None = Field(
        None,
        description="With a model: the answer context's rule and token "
        "budgets (none: the model policy's default of 5 items x 300 characters per "
        "call, every call's results shown).",
    )


class VerificationSpec(_Strict):
    mode: VerificationMode
    follows: str
    module: str = "Verification"
    thresholds: dict[str, float] = Field(default_factory=dict)
    prompt: str | None = Field(
        None,
        pattern=r"^[a-z0-9_]+$",
        description="unsw-algorithm-1 with a model: the request file (prompts/<prompt>.yaml) holding its "
        "`closed_book`, `consistency` and `cove` requests.",
    )


class AblationRow(_Strict):
    """One row of the paper's own ablation table (e.g. SuperGlasses Table 4), as this preset reproduces it."""

    group: str = Field(description="The paper's group, with its letter (e.g. 'B. Mandatory Retrieval').")
    title: str = Field(description="The paper's row label.")
    disabled: list[str] = Field(default_factory=list, description="Step ids switched off in this row.")
    if_removed: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per switched-off route step, what it decides in this row instead of its own `if_removed`.",
    )
    without: list[str] = Field(default_factory=list, description="Tools removed from the allow-list in this row.")
    reported: float | None = Field(None, description="The paper's figure for this row.")


class Ablation(_Strict):
    follows: str
    rows: list[AblationRow]
    reported_full: float | None = Field(
        None, description="The paper's figure for the full preset (its table's top row)."
    )
    reported_without_search: float | None = Field(
        None, description="The paper's figure with no retrieval at all (SuperGlasses Table 4 A 'w/o Search')."
    )


class Preset(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    title: str
    paper: str = Field(
        description="The reference, as a reader finds it: its title and arXiv id (or where it was published), and the "
        "sections followed; never a file name of a local papers folder."
    )
    summary: str
    policy: PolicyKind
    tools: list[str] | None = Field(None, description="The tools the preset uses (None: every tool of the task).")
    steps: list[Step] = Field(default_factory=list)
    answer: AnswerSpec | None = None
    verification: VerificationSpec
    abstain_below: float | None = Field(None, ge=0, le=1)
    max_steps: int | None = Field(None, ge=0, le=64)
    prompts: list[str] = Field(default_factory=list, description="Prompt files the preset's model steps use.")
    deviations: list[str] = Field(default_factory=list, description="Where this preset differs from the paper.")
    reported: list[str] = Field(default_factory=list, description="Figures the paper reports, for comparison.")
    disabled: list[str] = Field(
        default_factory=list, description="Step ids (or 'verification') switched off: ablation variants."
    )
    ablation: Ablation | None = Field(
        None,
        description="The paper's ablation rows (benchmarks.ablate prints them first, with the paper's group letters).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Preset:
        ids = [s.id for s in self.steps]
        if len(ids) != len(set(ids)):
            raise ValueError(f"preset {self.name!r}: repeated step ids")
        unknown = set(self.disabled) - set(ids) - {"verification"}
        if unknown:
            raise ValueError(f"preset {self.name!r}: cannot disable unknown step(s) {sorted(unknown)}")
        if self.policy != "pipeline" and self.steps:
            raise ValueError(f"preset {self.name!r}: only a pipeline preset has steps")
        if self.policy == "pipeline" and self.answer is None:
            raise ValueError(f"preset {self.name!r}: a pipeline preset needs an `answer` section")
        for row in self.ablation.rows if self.ablation else []:
            bad = (set(row.disabled) - set(ids) - {"verification"}) | (set(row.if_removed) - set(row.disabled))
            if bad:
                raise ValueError(
                    f"preset {self.name!r}: ablation row {row.title!r} names unknown or not-disabled "
                    f"step(s) {sorted(bad)}"
                )
        if self.steps and self.steps[0].with_previous:
            raise ValueError(f"preset {self.name!r}: the first step has no previous step to run with")
        return self

    def active_steps(self) -> list[Step]:
        return [s for s in self.steps if s.id not in self.disabled]

    def verification_mode(self) -> VerificationMode:
        return "none" if "verification" in self.disabled else self.verification.mode

    def modules(self) -> list[tuple[str, str]]:
        """(step id, module name) of the steps an ablation can switch off: the routers and the verification
        (tools are removed through the allow-list)."""
        out = [(s.id, s.module) for s in self.steps if s.route is not None]
        if self.verification.mode != "none":
            out.append(("verification", self.verification.module))
        return out
