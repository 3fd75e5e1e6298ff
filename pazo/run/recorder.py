"""The one way a run's results leave the process: its own directory (resolved config,
metrics.jsonl, summary.json, model.safetensors; the checkpoint in its private workspace), written
through `pazo.run.gate`, and, mirrored, the loggers of `logger.report_to`: Weights & Biases (offline by
default: no account or network needed, `wandb sync` later), TensorBoard and metrics.csv
(`pazo.run.loggers`). The training loop writes nothing itself: every row, summary, checkpoint and saved
model goes through a `Recorder`, and every logger gets the same row, which `pazo.run.outlets` alone
decides (never the seed, the command line or a private diagnostic unless asked).

Every file is written whole or not at all (`pazo.run.gate`, by `pazo.files.rundir.write_atomic`; a
row of metrics.jsonl that a full disk cuts short is taken back), so a fault of the machine mid-run
leaves the last good summary, checkpoint and rows; the write it refused is a `WriteFault` naming the file."""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from pazo.config_schema import LoggerSchema
from pazo.run import gate, outlets
from pazo.run.checkpoint import LoopState, discard_checkpoint, save_checkpoint
from pazo.run.loggers import WRITERS
from pazo.run.metrics_file import lines_of, read_metric_rows, whole_row
from pazo.files.rundir import MODEL_FILE, WriteFault, writing
from pazo.run.weights import save_weights


def _clean(value):
    """JSON-safe values: NaN/inf become null, numpy scalars become floats."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _whole_rows_kept(metrics: Path, checkpoint_bytes: int) -> int:
    """Cut metrics.jsonl after its last whole row (`pazo.run.metrics_file.whole_row`: a row a killed
    attempt left half written goes) and return that row's step (0: none). The rows up to the
    checkpoint's offset stay in any case (a relaunch refused a file with a bad row before its last
    line: `pazo.run.attempts`); a file cut below that offset is cut back to its last whole line, so that
    the next row never follows half of one."""
    data = metrics.read_bytes()
    end = data.rfind(b"\n", 0, min(checkpoint_bytes, len(data))) + 1
    last = None
    for line in lines_of(data[end:]):
        row = whole_row(line)
        if row is None and not (line.endswith(b"\n") and not line.strip()):   # (a blank line: passed over)
            break
        end, last = end + len(line), row or last
    if last is None:   # no row after the checkpoint: the last one before it
        last = next(filter(None, map(whole_row, reversed(lines_of(data[:end])))), None)
    gate.cut_back(metrics, end)
    return last["step"] if last else 0


def write_json_atomic(path: Path, data: dict) -> None:
    gate.write_released(path, json.dumps(_clean(data), indent=2, sort_keys=True).encode())


@dataclass
class LastSummary:
    """The summary.json that this launch's recorder last wrote whole (None: none yet, so that any
    on disk is an earlier attempt's). An entry point reads it when an interrupt lands after the
    run's own handling of one (after the loop, before the process ends), to tell the run's own
    record, and how it ended, from an earlier attempt's."""

    summary: dict | None = None


class Recorder:
    """config.yaml, metrics.jsonl (one row per logged step), summary.json and the checkpoint of one
    run, mirrored to the loggers of `logger.report_to`, and any other record of it (`write_record`:
    the audit's audit.json).
    `resume_bytes`: continue an interrupted attempt; the rows it wrote after its checkpoint stay
    (they left the process: the directory's last row must keep covering them), and the resumed
    attempt, which computes those steps again from the checkpoint's noise stream, does not write
    them twice (`released_through`);
    `released_before`: the highest step the directory's earlier attempts released, as any of its
    outlets shows (`pazo.run.releases`), which this attempt's epsilon covers (`steps_released`);
    `wandb_id`: the W&B run to continue (the other loggers continue past the last step their files
    hold, given first the rows of metrics.jsonl they lack: `pazo.run.loggers`); `run`, `sampler`: the
    training run (`pazo.run.build.Run`) and its sampler, what its checkpoints and its end keep (none: the
    audit's); `rows`: False for a run that logs no rows (the audit), which then has no metrics.jsonl nor
    loggers but W&B; `logger`: the run's typed `logger` section (`pazo.config_schema.LoggerSchema`);
    `last`: where each summary it writes whole is noted (`LastSummary`)."""

    def __init__(self, run_dir: str | Path, cfg, logger: LoggerSchema, resume_bytes: int | None = None,
                 wandb_id: str | None = None, rows: bool = True, released_before: int = 0, run=None, sampler=None,
                 last: LastSummary | None = None):
        self.dir, self.released_before, self.run, self.sampler = Path(run_dir), released_before, run, sampler
        self.last = last if last is not None else LastSummary()
        with writing(self.dir):
            self.dir.mkdir(parents=True, exist_ok=True)
        self.resolved = OmegaConf.to_container(cfg, resolve=True)
        # (readable by its owner only: it holds the seed, which the guarantee assumes secret)
        gate.write_private(self.dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True).encode())
        self._metrics, self._ledger, self._offset = None, None, 0
        #: the last step an earlier attempt wrote a row for; a resumed attempt's rows up to it are not written again
        self.released_through = 0
        if rows:
            metrics = self.dir / "metrics.jsonl"
            with writing(metrics):
                if resume_bytes is not None and metrics.exists():
                    self.released_through = _whole_rows_kept(metrics, resume_bytes)
                self._metrics = gate.open_released(metrics, append=resume_bytes is not None)
                self._offset = metrics.stat().st_size
            with writing(self.dir / gate.LEDGER):
                self._ledger = gate.open_private(self.dir / gate.LEDGER)
        self.summary: dict = {}
        #: a heartbeat the machine refused to write (the run goes on; its next summary write tells)
        self.beat_fault: WriteFault | None = None
        self._lock = threading.Lock()
        self.private_diagnostics = bool(logger.private_diagnostics)
        report_to = list(logger.report_to)
        self.loggers = [WRITERS[name](self.dir) for name in report_to if name in WRITERS] if rows else []
        self._give_loggers_earlier_rows()
        self.wandb = None
        if "wandb" in report_to and logger.mode != "disabled":
            import wandb

            # W&B prints its own lines (run name, sync hint, history and summary tables) only when asked;
            # it records no metadata (the command line holds the seed) nor system load (it follows the
            # realised batches), and its config has no seed
            settings = wandb.Settings(silent=not logger.verbose, x_disable_meta=True,
                                      x_disable_stats=True, disable_git=True, save_code=False)
            self.wandb = wandb.init(
                mode=logger.mode, project=logger.project, entity=logger.entity,
                group=logger.group, name=logger.name or self.dir.name,
                tags=list(logger.tags or []), dir=str(self.dir),
                config=outlets.without_secrets(self.resolved),
                reinit="finish_previous", settings=settings,
                **({"id": wandb_id, "resume": "allow"} if wandb_id else {}))

    def _give_loggers_earlier_rows(self) -> None:
        """The rows an earlier attempt released in metrics.jsonl that a logger's files lack (a
        logger added on resume, or one a kill stopped before it got them): the released values
        themselves, never computed again (this attempt writes only the rows after them)."""
        metrics = self.dir / "metrics.jsonl"
        if not self.loggers or not self.released_through or not metrics.exists():
            return
        for row in read_metric_rows(metrics).rows:
            self._to_loggers(self._released(row))

    def _released(self, row: dict) -> dict:
        """The part of a row of metrics.jsonl that leaves for the loggers: one answer for all of them."""
        return outlets.released_row("metrics", row, self.private_diagnostics)

    def _to_loggers(self, released: dict) -> None:
        for logger in self.loggers:
            logger.write(released)

    @property
    def steps_released(self) -> int:
        """The steps released before this attempt ran them, by metrics.jsonl's rows or any other outlet."""
        return max(self.released_through, self.released_before)

    @property
    def wandb_id(self) -> str | None:
        return self.wandb.id if self.wandb is not None else None

    def log(self, row: dict) -> None:
        """A row of metrics.jsonl and the loggers; not one a resumed attempt computes again for a step
        an earlier attempt already wrote (the same noise, the same values: released once)."""
        if row["step"] <= self.released_through:
            return
        row = _clean(row)
        self._enter_in_ledger(row["step"])
        self._append((json.dumps(row) + "\n").encode())
        released = self._released(row)
        if self.wandb is not None:
            self.wandb.log(released, step=row["step"])
        self._to_loggers(released)

    def _enter_in_ledger(self, step: int) -> None:
        """The row's step in the run's ledger (`pazo.run.gate.LEDGER`) before the row leaves by any outlet:
        W&B may send a row its local log never holds (a kill loses its unwritten block), and a user may
        delete metrics.jsonl; the ledger still shows the step to the next launch (`pazo.run.releases`)."""
        with writing(self.dir / gate.LEDGER):
            self._ledger.write(f"{step}\n".encode())

    def _append(self, data: bytes) -> None:
        """One whole row at the end of metrics.jsonl: a write cut short is taken back."""
        path = self.dir / "metrics.jsonl"
        with writing(path):
            try:
                view, done = memoryview(data), 0
                while done < len(view):
                    done += self._metrics.write(view[done:])
            except OSError:
                gate.cut_back(path, self._offset)  # frees what the cut row took: possible on a full disk
                raise
        self._offset += len(data)

    def metrics_bytes(self) -> int:
        """Bytes of metrics.jsonl written so far (where a resumed attempt continues)."""
        return self._offset

    def write_record(self, name: str, record: dict) -> None:
        """Another JSON record of the run, `name` in its directory beside the summary (the audit's
        audit.json), written whole or not at all."""
        write_json_atomic(self.dir / name, record)

    def write_summary(self, summary: dict) -> None:
        with self._lock:
            self.summary = _clean({**summary, "heartbeat": time.time()})
            write_json_atomic(self.dir / "summary.json", self.summary)
            self.last.summary = self.summary

    def beat(self) -> None:
        """Refresh the summary's heartbeat (from the heartbeat thread; a write the machine refuses
        is kept in `beat_fault`, and the summary keeps its previous heartbeat)."""
        with self._lock:
            if self.summary.get("status") == "running":
                self.summary["heartbeat"] = time.time()
                try:
                    write_json_atomic(self.dir / "summary.json", self.summary)
                except WriteFault as fault:
                    self.beat_fault = fault

    def checkpoint(self, loop: LoopState) -> None:
        """Everything the run needs to continue exactly after `loop.step` (`pazo.run.checkpoint`),
        stored with its config's fingerprint, so that only the same run resumes from it."""
        loop.metrics_bytes, run = self.metrics_bytes(), self.run
        save_checkpoint(self.dir, fingerprint=run.cfg.fingerprint, module=run.module, streams=run.streams,
                        sampler=self.sampler, loop=loop,
                        extra={"total_steps": run.total_steps, "computation": run.private_computation,
                               "optimizer": run.method.update_rule.state_dict()})

    def finish(self, summary: dict) -> None:
        """For a finished run the model first (`train.save_model`, written whole), then the last
        summary, then no checkpoint (it holds the noise stream; `train.keep_checkpoint` keeps it);
        a failed run, which is never resumed, keeps no checkpoint either. A write the machine
        refuses raises a WriteFault before the summary says finished."""
        train = self.run.cfg.train   # (its typed section: `pazo.config_schema.TrainSchema`)
        if summary["status"] == "finished" and train.save_model:
            save_weights(self.dir / MODEL_FILE, self.run.module)
        self.write_summary(summary)
        self.close(failed=summary["status"] == "failed")
        if summary["status"] == "failed" or (summary["status"] == "finished" and not train.keep_checkpoint):
            discard_checkpoint(self.dir)

    def fail(self, summary: dict) -> WriteFault | None:
        """The summary of a run that crashed, faulted or was interrupted a second time; a crashed
        (failed) run's checkpoint is deleted, an interrupted or faulted one's kept for the relaunch.
        Best effort: a summary the machine refuses to write (a full disk) leaves the previous one,
        and the refusal is returned rather than raised over the error being recorded."""
        try:
            self.write_summary(summary)
            refused = None
        except WriteFault as fault:
            refused = fault
        try:
            self.close(failed=True)
        except WriteFault as fault:   # a logger's last flush
            refused = refused or fault
        if summary["status"] == "failed":
            discard_checkpoint(self.dir)
        return refused

    def close(self, failed: bool) -> None:
        """Close metrics.jsonl, each logger and W&B (its run summary sent); a logger's refused last
        write is raised once all are closed."""
        for own in (self._metrics, self._ledger):
            if own is not None and not own.closed:
                own.close()
        refused = None
        for logger in self.loggers:
            try:
                logger.close()
            except WriteFault as fault:
                refused = refused or fault
        if self.wandb is not None:
            flat = {k: v for k, v in self.summary.items() if not isinstance(v, (dict, list))}
            self.wandb.summary.update(outlets.released_row("summary", flat, self.private_diagnostics))
            self.wandb.finish(exit_code=1 if failed else 0)
            self.wandb = None
        if refused is not None:
            raise refused
