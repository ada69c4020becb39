"""CRAG-MM: dataset schema and loading, the embedded demo benchmark, search backends and scoring."""
