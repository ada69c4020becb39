"""The training road: traces -> training examples that are the inference prompt (`training.export`), chat templates
that train (`training.templates`), LoRA fine-tuning with TRL (`training.finetune`). Above the agent (`graph`), whose
prompt code it reuses; below the benchmarks (`benchmarks.distill` runs the whole road)."""
