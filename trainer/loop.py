"""The training loop: one step at a time, instrumented through ``RunWriter``. Imports torch.

Per step it logs step, epoch, loss, lr, grad_norm (before clipping), step_time, throughput and
memory; val_loss at each evaluation; for stateful tasks the state probe and a sampled graph size.
Logging stays cheap: one host sync per step (loss and grad norm read together), memory read
every few steps, the writer encodes and queues (its own thread writes).
"""

from __future__ import annotations

import math
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as tdist
from torch import nn

from trainwatch import RunWriter
from trainwatch.probes import graph_size, state_attached
from trainwatch.trainer import checkpoint
from trainwatch.trainer.config import Config, ConfigError, TrainCfg
from trainwatch.trainer.dist import DistInfo
from trainwatch.trainer.faults import Faults
from trainwatch.trainer.gradnorm import clip_, grads_of, total_norm, uniform
from trainwatch.trainer.schedule import lr_at
from trainwatch.trainer.steplog import StepLog
from trainwatch.trainer.sysmem import RssReader
from trainwatch.trainer.tasks import build_task

EXIT_OK = 0
EXIT_CRASH = 1


@dataclass
class StopFlag:
    """SIGINT/SIGTERM ask the loop to stop after the current step (and save a checkpoint).

    A second signal more than two seconds after the first raises KeyboardInterrupt at once (a
    person pressing Ctrl-C again); one that follows immediately (Ctrl-C reaching both a launcher
    and its workers) does not.
    """

    signum: int | None = None
    at: float = 0.0
    _old: dict[int, Any] = field(default_factory=dict)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (an embedding app): no handlers
                pass

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None and time.monotonic() - self.at > 2.0:
            raise KeyboardInterrupt
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            name = signal.Signals(signum).name
            print(f"trainwatch: {name} received; stopping after this step and saving a "
                  "checkpoint (send it again to stop at once)", file=sys.stderr, flush=True)

    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)


def _attached(state: Any) -> bool:
    """``probes.state_attached``, with the common LSTM case, a tuple of two tensors, checked
    inline (this runs every step)."""
    if type(state) is tuple and len(state) == 2 and all(type(t) is torch.Tensor for t in state):
        return state[0].grad_fn is not None or state[1].grad_fn is not None
    return state_attached(state)


def build_optimizer(params: list[nn.Parameter], t: TrainCfg) -> torch.optim.Optimizer:
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    if t.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay)
    return torch.optim.Adam(params, lr=t.lr, weight_decay=t.weight_decay)


class Trainer:
    """One run of one config. ``instrument=False`` trains identically but measures and logs
    nothing (the baseline of the logging-overhead benchmark)."""

    def __init__(self, cfg: Config, run_dir: Path, device: torch.device,
                 dist: DistInfo | None = None, instrument: bool = True) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.device = device
        self.dist = dist = dist or DistInfo()
        self.instrument = instrument
        self.task = build_task(cfg, device, dist.rank)
        self.model = self.task.model
        self.faults = Faults(cfg.fault, dist.rank)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        opt_params = self.faults.optimizer_params(self.model)
        self.opt = (self.faults.make_optimizer(opt_params, cfg.train)
                    or build_optimizer(opt_params, cfg.train))
        self.net: nn.Module = self.model
        if dist.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.net = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)
        self.step = 0
        self.stop = StopFlag()
        self.log = StepLog(None)
        """Where records go; writes nothing until :meth:`open_writers` (or when not
        instrumented)."""
        self._mem = 0.0
        self._probe = self.task.stateful
        self._cuda = device.type == "cuda"
        self._clip = cfg.train.grad_clip if cfg.train.grad_clip > 0 else math.inf
        self._numel = sum(p.numel() for p in self.params)
        self._uniform = uniform(self.params)
        self._stop_all = False
        self._rss = RssReader()

    # ------------------------------------------------------------------ writers
    def open_writers(self) -> None:
        if not self.instrument:
            return
        conf = self.cfg.to_dict()
        fi = self.cfg.log.flush_interval
        main = RunWriter(self.run_dir, config=conf, flush_interval=fi) if self.dist.is_main else None
        rank = None
        if self.dist.enabled:
            rank = RunWriter(self.run_dir, config=conf, rank=self.dist.rank, flush_interval=fi)
        self.log = StepLog(main, rank)

    def close_writers(self, status: str, exit_code: int, **fields: Any) -> None:
        self.log.close(status, exit_code, **fields)
        self._rss.close()

    def event(self, name: str, **fields: Any) -> None:
        self.log.event(name, **fields)

    # ------------------------------------------------------------------ checkpoints
    def save(self, step: int) -> Path | None:
        if not self.dist.is_main:
            return None
        path = checkpoint.save(self.run_dir, step, {
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            # the schedule is a pure function of the step: its state is the step it is at
            "scheduler": {"kind": self.cfg.train.schedule, "last_step": step},
            "rng": checkpoint.rng_state(),
            "task": self.task.state_dict(),
        }, keep=self.cfg.checkpoint.keep)
        self.event("checkpoint", step=step, path=str(path))
        return path

    def resume(self) -> Path | None:
        """Restore the newest checkpoint (None when there is none). Raises ConfigError, before
        anything is written, when it does not fit this config (another model size, say)."""
        path = checkpoint.latest(self.run_dir)
        if path is None:
            return None
        try:
            ck = checkpoint.load(path)
            self.model.load_state_dict(ck["model"])
            self.opt.load_state_dict(ck["optimizer"])
            checkpoint.set_rng_state(ck["rng"])
            self.task.load_state_dict(ck["task"])
            self.step = int(ck["step"])
        except (RuntimeError, KeyError, ValueError, OSError) as e:
            first = " ".join(x.strip() for x in str(e).splitlines() if x.strip()) or repr(e)
            raise ConfigError(f"{path}: cannot resume from this checkpoint with this config "
                              f"({first[:200]}); resume with the run's own config (omit CONFIG) "
                              "or start a new --run-dir") from e
        if self.dist.enabled:  # each rank's batches differ: re-seed per rank after the restore
            self.task.gen.manual_seed(self.cfg.seed * 1009 + self.dist.rank + 7 * self.step)
        return path

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> None:
        cfg, task, faults = self.cfg, self.task, self.faults
        t0 = time.perf_counter()
        faults.before_step(step, task, self.stop.requested, self.log.flush)
        lr = lr_at(step, cfg.train, cfg.fault)
        for g in self.opt.param_groups:
            g["lr"] = lr
        batch = faults.batch(step, task.next_batch(step), task)
        attached = None
        if self._probe and self.instrument:
            attached = _attached(task.incoming_state())
        loss = faults.loss(step, task.forward_loss(self.net, batch))
        gsize = None
        if self._probe and self.instrument and step % cfg.log.graph_every == 0:
            gsize = graph_size(loss, cfg.log.graph_limit)
        wait = 0.0
        if self.dist.enabled:
            # Doubles as a barrier: the time a rank waits here is time spent on slower ranks,
            # kept out of its own step time so a straggler stands out. It also agrees on
            # stopping, so every rank stops after the same step.
            ts = time.perf_counter()
            flag = torch.tensor([1.0 if self.stop.requested() else 0.0], device=self.device)
            tdist.all_reduce(flag, op=tdist.ReduceOp.MAX)
            self._stop_all = bool(flag.item())
            wait = time.perf_counter() - ts
        self.model.zero_grad(set_to_none=True)
        try:
            loss.backward(retain_graph=faults.retain_graph(step))
        except RuntimeError:
            # the forward ran: log what it showed (the state probe explains a failing backward)
            if self.instrument:
                partial: dict[str, Any] = {"loss": float(loss.detach()), "lr": lr}
                if attached is not None:
                    partial["state_attached"] = 1.0 if attached else 0.0
                if gsize is not None:
                    partial["graph_size"] = gsize
                self.log.record(step, partial)
            raise
        faults.after_backward(step, loss)
        gn = None
        if self.instrument or self._clip < math.inf:
            grads = grads_of(self.params)
            gn = total_norm(grads, self._numel, self._uniform)
            if self._clip < math.inf:
                clip_(grads, self._clip, gn, self._uniform)
        self.opt.step()
        task.end_step()
        self.step = step
        if not self.instrument:
            return
        if self._cuda:  # one device sync for both numbers
            loss_v, gn_v = torch.stack([loss.detach(), gn.to(loss.dtype)]).tolist()
        else:
            loss_v, gn_v = loss.item(), gn.item()  # type: ignore[union-attr]
        dt = time.perf_counter() - t0
        if self._cuda:
            self._mem = torch.cuda.memory_allocated(self.device) / 2**20
        elif (step - 1) % cfg.log.memory_every == 0 or not self._mem:
            self._mem = self._rss()
        rec: dict[str, Any] = {
            "epoch": task.epoch(step), "loss": loss_v, "lr": lr, "grad_norm": gn_v,
            "step_time": dt, "throughput": task.per_step / dt if dt > 0 else 0.0,
            "memory": self._mem,
        }
        if attached is not None:
            rec["state_attached"] = 1.0 if attached else 0.0
        if gsize is not None:
            rec["graph_size"] = gsize
        if self.dist.is_main and cfg.eval.every and (
                step % cfg.eval.every == 0 or step == cfg.train.steps):
            rec["val_loss"] = self.evaluate(step)
        rank_rec = None
        if self.dist.enabled:
            busy = dt - wait
            rank_rec = {"loss": loss_v, "step_time": busy, "sync_wait": wait,
                        "throughput": task.per_step / busy if busy > 0 else 0.0}
        self.log.record(step, rec, rank_rec)

    def evaluate(self, step: int) -> float:
        t0 = time.perf_counter()
        self.model.eval()
        try:
            val = self.task.evaluate(self.model)
        finally:
            self.model.train()
        self.event("eval", step=step, val_loss=val, seconds=round(time.perf_counter() - t0, 4))
        return val

    def should_stop(self) -> bool:
        return self._stop_all if self.dist.enabled else self.stop.requested()

    # ------------------------------------------------------------------ the run
    def run(self, resume: bool = False) -> int:
        """Train to the end (or a signal); returns the process exit code."""
        restored = self.resume() if resume else None
        if resume and restored is None and self.dist.is_main:
            print(f"trainwatch: --resume: no checkpoint in {checkpoint.ckpt_dir(self.run_dir)}; "
                  "starting from step 0", file=sys.stderr)
        self.stop.install()
        self.open_writers()
        try:
            if restored is not None:
                self.event("resume", step=self.step, checkpoint=str(restored))
            return self._loop()
        finally:
            self.stop.restore()

    def _loop(self) -> int:
        cfg = self.cfg
        every = cfg.checkpoint.every
        last_saved = self.step
        try:
            for step in range(self.step + 1, cfg.train.steps + 1):
                self.train_step(step)
                if every and step % every == 0:
                    self.save(step)
                    last_saved = step
                if self.should_stop():
                    break
        except torch.OutOfMemoryError as e:
            return self._oom(e)
        except KeyboardInterrupt:
            self.close_writers("interrupted", self.stop.exit_code, error="stopped at once")
            return self.stop.exit_code
        except Exception as e:  # noqa: BLE001 - every crash is reported, then the code returned
            traceback.print_exc()
            self.close_writers("crashed", EXIT_CRASH, error=f"{type(e).__name__}: {e}"[:300])
            return EXIT_CRASH
        if self.step != last_saved:
            self.save(self.step)
        if self.should_stop():
            self.close_writers("interrupted", self.stop.exit_code)
            return self.stop.exit_code
        self.close_writers("finished", EXIT_OK)
        return EXIT_OK

    def _oom(self, e: BaseException) -> int:
        """Out of memory: report it, keep a checkpoint of the last completed step, exit 1."""
        self.model.zero_grad(set_to_none=True)
        if self._cuda:
            torch.cuda.empty_cache()
        msg = str(e).strip().splitlines()[0] if str(e).strip() else "out of memory"
        self.event("oom", step=self.step + 1, message=msg[:300])
        path = None
        try:
            path = self.save(self.step)
        except Exception as save_err:  # noqa: BLE001 - the OOM is the news; say why no checkpoint
            print(f"trainwatch: could not save a checkpoint after the OOM: {save_err}",
                  file=sys.stderr)
        kept = f"checkpoint of step {self.step} kept at {path}" if path else "no checkpoint saved"
        print(f"trainwatch: out of memory at step {self.step + 1}: {msg}\n"
              f"trainwatch: {kept}; lower train.batch_size or the model size, then run again "
              "with --resume", file=sys.stderr, flush=True)
        self.close_writers("crashed", EXIT_CRASH, error=f"OutOfMemoryError: {msg}"[:300])
        return EXIT_CRASH
