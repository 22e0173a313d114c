"""A run's records: the run directory and what is derived from it for a person.

- `store`: the manifest, the hidden splits and one Parquet part per finished node (the one
  writer); `runs`: `open_run`, the one reader.
- `summary`: summary.md; `outputs`: tree.html (its page, CSS and script are engine/assets/),
  plots and good/.
"""
