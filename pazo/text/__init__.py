"""Text and prompt handling shared by `pazo.data` and `pazo.models`, below both (it imports neither):
the prompted tasks' specifications and label words (`prompts`), the pad-token rule (`tokens`) and
SQuAD's answer metrics (`squad_metric`).
"""
