"""CRAG-MM: its `Benchmark` (`spec.py`), the dataset schema and loading (`dataset.py`), question-set content and the
embedded demo (`content.py`, `bundled/`, `demo.py`), scoring (`scoring/`) and evaluation (`evaluate.py`,
`rescore.py`)."""
