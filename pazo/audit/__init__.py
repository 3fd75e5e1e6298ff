"""Privacy auditing in one training run (Steinke, Nasr and Jagielski 2023): `python -m pazo.audit`.

`bound.py` turns correct guesses into a lower bound on epsilon; `canaries.py` makes the canaries
and scores them (black box: the final model's loss; white box: every release); `run.py` is the
run; `command.py` the command line and its exit status (4: the run is NOT as private as printed)."""
