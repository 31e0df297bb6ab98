"""``console_error`` (and ``state_detach`` (c)): known error texts in the run's console output.

Each known error maps to a diagnosis and a fix. PyTorch's "backward through the graph a second
time" error, and its in-place "is at version N; expected version M" error once retain_graph=True
is in play, are the symptoms of a recurrent state that is never detached: they are reported as
``state_detach``. The same error repeated (every rank prints its traceback) is one alert.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainwatch.rules.builtin.state_detach import DETACH_CAUSES, DETACH_FIXES, DetachConfig
from trainwatch.rules.config.schema import RuleBase, integer
from trainwatch.rules.engine.base import Context, Hit, Rule, make_hit


@dataclass(frozen=True)
class ConsoleConfig(RuleBase):
    cooldown_lines: int = integer(ge=0)
    """The same error again within this many lines is the same episode."""


MAX_TEXT = 300
"""Most characters of a console line kept in an alert's evidence."""


@dataclass(frozen=True)
class Known:
    kind: str
    pattern: re.Pattern[str]
    message: Callable[[re.Match[str]], str]
    causes: tuple[tuple[str, float], ...]
    fixes: tuple[str, ...]


def _size(m: re.Match[str]) -> str:
    size = m.groupdict().get("size")
    return f" (tried to allocate {size})" if size else ""


KNOWN: tuple[Known, ...] = (
    Known(
        "cuda_oom",
        re.compile(r"(CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|"
                   r"MPS backend out of memory)(.*?Tried to allocate (?P<size>[\d.]+ ?[KMGT]i?B))?",
                   re.IGNORECASE),
        lambda m: f"The GPU ran out of memory{_size(m)}.",
        (("the batch (or sequence length, or image size) is too large for this GPU", 0.6),
         ("memory grows over the run: tensors kept with their graphs (e.g. total_loss += loss)",
          0.4),
         ("fragmentation: enough memory is free but not in one piece", 0.2)),
        ("Lower the batch size and use gradient accumulation to keep the effective batch",
         "Use bf16/AMP and activation checkpointing",
         "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
         "Accumulate logged losses with loss.item()"),
    ),
    Known(
        "cpu_oom",
        re.compile(r"DefaultCPUAllocator: can't allocate memory|Cannot allocate memory"),
        lambda m: "The host ran out of memory (RAM).",
        (("the dataset or a cache is held in RAM, or too many data-loader workers copy it", 0.6),
         ("a leak on the host: growing lists of tensors or arrays", 0.4)),
        ("Lower num_workers or memory-map the dataset", "Watch RSS per process (top, ps)"),
    ),
    Known(
        "nccl_timeout",
        re.compile(r"Watchdog caught collective operation timeout|NCCL.{0,80}time(d)? ?out|"
                   r"ProcessGroupNCCL.{0,80}Timeout|collective operation timeout",
                   re.IGNORECASE),
        lambda m: "A collective operation (NCCL) timed out: some rank stopped taking part.",
        (("another rank crashed or hung first; the others waited for it", 0.5),
         ("ranks took different code paths and called different collectives", 0.4),
         ("a straggler or a network problem made one rank far too slow", 0.3)),
        ("Find the first error in the other ranks' logs: it is the real cause",
         "Run with NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
         "Make sure every rank calls the same collectives in the same order"),
    ),
    Known(
        "device_mismatch",
        re.compile(r"Expected all tensors to be on the same device(?:, but found at least two "
                   r"devices, (?P<a>[\w:]+) and (?P<b>[\w:]+))?"),
        lambda m: ("Tensors on different devices met in one operation"
                   + (f" ({m.group('a')} and {m.group('b')})." if m.group("a") else ".")),
        (("a tensor is created without device= (e.g. torch.zeros(n)) inside the model or loss",
          0.5),
         (("a model part or buffer was not moved: a plain tensor attribute instead of "
          "register_buffer, or a module kept in a Python list"), 0.4),
         ("the inputs or targets were left on the CPU", 0.4)),
        ("Create tensors with device=x.device (or torch.zeros_like)",
         "Register tensors with register_buffer and modules in nn.ModuleList",
         "Move every part of the batch with .to(device)"),
    ),
    Known(
        "dataloader_killed",
        re.compile(r"DataLoader worker \(pid(?:\(s\))? [\d, ]+\) (?:is killed by signal: ?"
                   r"(?P<sig>[\w ]+)|exited unexpectedly)|Unexpected bus error encountered in "
                   r"worker"),
        lambda m: ("A DataLoader worker was killed"
                   + (f" (signal: {m.group('sig').strip()})." if m.group("sig") else
                      " (bus error: shared memory)." if "bus error" in m.group(0) else ".")),
        (("the host ran out of memory and the OOM killer stopped the worker", 0.5),
         ("shared memory (/dev/shm) is too small for the batches (Bus error)", 0.4),
         ("the worker crashed in the dataset's code", 0.3)),
        ("Lower num_workers or prefetch_factor",
         "In Docker, raise --shm-size or use --ipc=host",
         "Run with num_workers=0 to see the worker's own error"),
    ),
    Known(
        "device_assert",
        re.compile(r"device-side assert triggered"),
        lambda m: "A CUDA device-side assert fired (usually an index out of range).",
        (("a target label outside [0, num_classes) in a cross-entropy loss", 0.6),
         ("an index out of range in an embedding or a gather", 0.5)),
        ("Rerun with CUDA_LAUNCH_BLOCKING=1 for the failing line, or on the CPU for a clear error",
         "Check the range of labels and indices in the batch"),
    ),
)

@dataclass(frozen=True)
class Diagnosis:
    """What a known error text means: its kind, one sentence, causes and fixes."""

    kind: str
    message: str
    causes: tuple[tuple[str, float], ...]
    fixes: tuple[str, ...]


def diagnose(text: str) -> Diagnosis | None:
    """The diagnosis of a known error in ``text`` (one of :data:`KNOWN`, or PyTorch's second
    backward through one graph, a state never detached), else None. ``console_error`` tells it
    for a console line; ``run_crashed`` for the error text a run ended with."""
    if _BACKWARD_TWICE.search(text):
        return Diagnosis("backward_twice", BACKWARD_TWICE_MESSAGE, DETACH_CAUSES, DETACH_FIXES)
    m = _VERSION.search(text)
    if m is not None:
        return Diagnosis("inplace", f"A tensor needed for backward was modified in place (version "
                                    f"{m.group('n')}, expected {m.group('m')}).",
                         _INPLACE_CAUSES, _INPLACE_FIXES)
    for k in KNOWN:
        m = k.pattern.search(text)
        if m is not None:
            return Diagnosis(k.kind, k.message(m), k.causes, k.fixes)
    return None


def told_by(ctx: Context, kind: str) -> str | None:
    """Which of ``console_error`` and ``run_crashed`` told an error of ``kind`` so far (see
    :attr:`Context.errors_told`), if either did."""
    return ctx.errors_told.get(kind)


def exception_key(text: str) -> str:
    """An exception's ``Type: message`` as both sources write it: the console prints the
    dotted type (``torch.OutOfMemoryError``), a writer often the bare name."""
    m = _DOTTED.match(text.strip())
    return EXCEPTION + (m.group("rest") if m else text.strip())[:200]


EXCEPTION = "exception:"
"""Prefix of an exception's key in :attr:`Context.errors_told`."""


_DOTTED = re.compile(r"(?:[A-Za-z_]\w*\.)+(?P<rest>[A-Za-z_]\w*(?::.*)?)$")
_INPLACE_CAUSES = (
    (("an in-place op (x += ..., relu_(inplace=True), optimizer.step()) changed a tensor the "
      "backward pass still needs"), 0.7),
    ("a state kept across steps with retain_graph=True", 0.3))
_INPLACE_FIXES = ("Replace the in-place op with its out-of-place form (x = x + ...)",
                  "Find it with torch.autograd.set_detect_anomaly(True)")
BACKWARD_TWICE_MESSAGE = ("PyTorch refused a second backward through the same graph: the state "
                          "carried between steps is still attached to it.")
_BACKWARD_TWICE = re.compile(r"Trying to backward through the graph a second time")
_VERSION = re.compile(r"is at version (?P<n>\d+); expected version (?P<m>\d+)")
_KNOWN_ANY = re.compile("|".join(
    [k.pattern.pattern for k in KNOWN] + [_BACKWARD_TWICE.pattern, _VERSION.pattern]
), re.IGNORECASE)
_TRACEBACK = "Traceback (most recent call last):"
_ANY = re.compile("|".join([_KNOWN_ANY.pattern, "retain_graph", re.escape(_TRACEBACK)]),
                  re.IGNORECASE)
_EXCEPTION = (
    re.compile(r"(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning|Failure|"
               r"Fault|Quit|Iteration))(?::\s*(?P<msg>.*))?$"),
    re.compile(r"(?P<type>[A-Za-z_][\w.]*):\s+(?P<msg>.+)$"),
)
"""The line that ends a traceback: the exception's (dotted) type name, then its message (a name
of another shape only with a message: a bare word after the frames is not taken for one)."""
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_TB_LINES = 400
"""Most lines a traceback is followed for its exception line (a log that never gives one, or
interleaves other output with it, does not keep the rule reading every line)."""


class ConsoleRule(Rule):
    id = "console_error"
    also_raises = ("state_detach",)  # PyTorch's errors of a state never detached, (c)

    def __init__(self, cfg: ConsoleConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.detach: DetachConfig = ctx.config.rules["state_detach"]
        self.retain_seen = False
        self.twice_seen = False
        self.last_line: dict[str, int] = {}
        self.traceback_at: int | None = None
        """Line of the traceback being read to its exception line (across reads), if any."""
        self.traceback_known = False
        """A known error was told inside it: its exception line is not told again."""

    def update_console(self, lines: Sequence[str], first_line: int, step: int,
                       time: float) -> list[Hit]:
        hits: list[Hit] = []
        for i, line in enumerate(lines):
            n = first_line + i
            if self.traceback_at is not None:
                hit = self._traceback_line(line, n, step, time)
                if hit is not None:
                    hits.append(hit)
            if not _ANY.search(line):
                continue
            if "retain_graph=True" in line:
                self.retain_seen = True
            if _TRACEBACK in line:
                self.traceback_at, self.traceback_known = n, False
                continue
            hit = self._line(line, n, step, time)
            if hit is not None:
                hits.append(hit)
            if self.traceback_at is not None and _KNOWN_ANY.search(line):
                self.traceback_known = True
        return hits

    def _traceback_line(self, line: str, n: int, step: int, time: float) -> Hit | None:
        """A line after ``Traceback (most recent call last):``: the frames are indented; the
        first line that is not ends it, the exception's ``Type: message``. An exception no known
        error matched is told as such: a script that died of it stops logging, and the last
        thing a person at 2 a.m. needs is to wait a minute for ``stalled_stream`` to say so."""
        start = self.traceback_at
        assert start is not None
        if n == start or not line.strip() or line[:1].isspace() or line.startswith(_CHAINED):
            if n - start > _TB_LINES:
                self.traceback_at = None
            return None
        self.traceback_at = None
        m = _EXCEPTION[0].match(line.strip()) or _EXCEPTION[1].match(line.strip())
        if m is None or self.traceback_known or _KNOWN_ANY.search(line) or not self.cfg.enabled:
            return None  # (a known error's own line is told by the known pattern)
        kind = m.group("type")
        if not self._due(f"exception:{kind}:{m.group('msg') or ''}", n):
            return None  # every rank prints the same traceback: one alert
        text = line.strip()[:MAX_TEXT]
        key = exception_key(text)
        if told_by(self.ctx, key) == "run_crashed":
            return None  # the run ended with this exception: told, as an error, with its end
        self.ctx.errors_told[key] = self.id
        return make_hit(
            self.id, pos=n, severity="warning", step=step, time=time, metric=None,
            message=f"A Python exception was printed: {text} (console line {n:,}, its traceback "
                    f"from line {start:,}).",
            evidence={"line": n, "text": text, "kind": "uncaught_exception",
                      "traceback_line": start, "exception": kind},
            causes=[(("the script raised an exception it did not catch: the run has stopped "
                     "(its metrics stop; no run_end, or status crashed)"), 0.6),
                    (("an exception caught and logged (a data-loader retry, a callback): the run "
                     "goes on"), 0.4)],
            fixes=[(f"Read the traceback from console line {start:,}: its last frame in your code "
                   "is where it failed"),
                   ("Reproduce it on the failing step under a debugger: python -m pdb -c continue "
                   "SCRIPT")])

    def _due(self, kind: str, n: int) -> bool:
        last = self.last_line.get(kind)
        if last is not None and n - last <= self.cfg.cooldown_lines:
            self.last_line[kind] = n
            return False
        self.last_line[kind] = n
        return True

    def _line(self, line: str, n: int, step: int, time: float) -> Hit | None:
        text = line.strip()[:MAX_TEXT]
        if _BACKWARD_TWICE.search(line):
            self.twice_seen = True
            return self._detach("backward_twice", n, step, time, text, BACKWARD_TWICE_MESSAGE)
        m = _VERSION.search(line)
        if m is not None and (self.retain_seen or self.twice_seen):
            return self._detach("inplace_after_retain", n, step, time, text,
                                f"A tensor needed for backward was modified in place (version "
                                f"{m.group('n')}, expected {m.group('m')}) after "
                                "retain_graph=True: the carried state still points into old "
                                "graphs.")
        d = diagnose(line)
        if d is None or not self.cfg.enabled or not self._due(d.kind, n):
            return None
        if told_by(self.ctx, d.kind) == "run_crashed":
            return None  # the run ended with this error: it was told with its end
        self.ctx.errors_told[d.kind] = self.id
        return make_hit(self.id, pos=n, severity=self.cfg.severity, step=step, time=time,
                        metric=None, message=d.message,
                        evidence={"line": n, "text": text, "kind": d.kind},
                        causes=d.causes, fixes=d.fixes)

    def _detach(self, kind: str, n: int, step: int, time: float, text: str, message: str
                ) -> Hit | None:
        rule = "state_detach" if self.detach.enabled else self.id
        severity = self.detach.probe_severity if self.detach.enabled else self.cfg.severity
        if (rule == self.id and not self.cfg.enabled) or not self._due(kind, n):
            return None
        if told_by(self.ctx, kind) == "run_crashed":
            return None
        self.ctx.errors_told[kind] = self.id
        return make_hit(rule, pos=n, severity=severity, step=step, time=time, metric=None,
                        message=message, evidence={"line": n, "text": text, "kind": kind},
                        causes=DETACH_CAUSES, fixes=DETACH_FIXES)
