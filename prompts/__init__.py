"""Every prompt as a text file: the model loop's (`vlm_*.txt`, `profiles.yaml`), the presets' routers'
(`preset_*`), the judges' (`judge_*`).

A package of data only: code reads the files through `importlib.resources.files("prompts")`, so an installed wheel
has them exactly as a checkout does.
"""
