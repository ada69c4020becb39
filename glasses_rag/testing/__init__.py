"""Test doubles, for the tests and the benchmarks only: scripted and fake model servers, hostile servers and web,
tiny models, a vLLM emulation. No library module imports them (tests/test_architecture.py)."""
