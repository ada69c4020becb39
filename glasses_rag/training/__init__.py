"""The training road: traces -> training examples that are the inference prompt (`glasses_rag.training.export`), chat
templates that train (`glasses_rag.training.templates`), LoRA fine-tuning with TRL (`glasses_rag.training.finetune`),
and the learners from the score: rollouts with their rewards and token records (`rollouts`), rejection-sampling
fine-tuning (`rft`), DPO and KTO (`preferences`), GRPO (`grpo`), on shared scaffolding (`learners`), and the
abstention threshold (`calibrate`). Above the agent (`graph`), whose prompt code it reuses; below the benchmarks
(`benchmarks.distill` runs the whole road)."""
