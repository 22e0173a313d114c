"""The answer deployed: its saved model and the folder that predicts without this project.

- `saved_model`: the answer's fits saved at the end of a run (`best/model/`).
- `bundle`: the answer as a folder (`python -m engine.export model`); `bundle_predict`: that
  folder's `predict.py`, copied as it is (it imports nothing of ours).

The commands that use them stay where users call them: `engine.predict`, `engine.serve`,
`engine.export`, and `engine.api`'s `Predictor`.
"""
