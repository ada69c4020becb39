"""SuperGlasses, the second benchmark: its `Benchmark` (`spec.py`), the dataset loader (`loader.py`), an offline
sample (`sample.py`), traces as SuperGlasses search logs and a tolerant log reader (`logs.py`), the judge and sliced
report (`evaluate.py`) and the trajectory comparison (`compare.py`). See docs/superglasses.md."""
