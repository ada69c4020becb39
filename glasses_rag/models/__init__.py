"""Model wrappers: real models from local paths, each with a named offline fallback."""
