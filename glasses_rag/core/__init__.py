"""Shared types (`Hit`, `Box`, `Fact`, `Verdict`, `HistoryTurn`, `ImageInfo`, `ModelCall`), deadlines and cancel
scopes (`calls.py`), atomic files, content hashes, credentials: what every other package may import."""
