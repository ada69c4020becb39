"""Benchmark scripts that print figures (`python -m benchmarks.<name>`): latency, throughput, scaling, memory,
start-up, presets and ablations, generalization, distillation. Not installed."""
