"""Rule-based text utilities (no model): words, stems and synonyms, sentences, references, instruction detection,
abstention (`nlp.py` gathers them), and numbers with units and currencies (`units.py`)."""
