"""The project's one namespace for everything but the agent (`graph`), the tools (`tools`) and the trace record
(`traces`): shared types, text, web and model code, the policies, each benchmark's evaluation, the run harness,
training and the test doubles. Layers: tests/test_architecture.py; map: docs/architecture.md."""
