"""What every package shares, and nothing else: the lowest layer beside `fileio`.

- `errors`: the error types and the one-line message a command prints for them.
- `chat`: an LLM request and its reply (`ChatPrompt`, `Reply`).
- `metric`: the metric table (direction, formula, resampled form, perfect value).

Pure: no Ray, no I/O, no import of any other package of ours.
"""
