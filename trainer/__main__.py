"""``python -m trainwatch.trainer CONFIG [...]`` (also ``trainwatch train``, and under torchrun).

Everything that can be checked before torch is imported is: the config, the device request and
the run directory, so a typo costs a second, not a torch import and a crashed run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from trainwatch.trainer.config import Config, ConfigError, summary
from trainwatch.trainer.configfile import list_packaged, load_config
from trainwatch.trainer.supervise import RUN_DIR_ENV

EXIT_USAGE = 2

EPILOG = """\
examples:
  {prog} lstm_freq --run-dir runs/lstm
  {prog} mlp --set train.lr=3e-4 train.steps=500
  {prog} faults/lr_spike --set fault.step=100 fault.factor=50
  {prog} --resume --run-dir runs/lstm      # continue from its checkpoint
  torchrun --nproc_per_node=2 -m trainwatch.trainer mlp --run-dir runs/ddp
  {prog} faults/slow_rank                   # dist.nproc: 2 starts both ranks itself

CONFIG is a YAML path or a packaged config name (--list shows them). Without --run-dir the run
goes to $TRAINWATCH_RUN_DIR, else ./runs/NAME-YYYYmmdd-HHMMSS.
"""


def parse_args(argv: Sequence[str] | None, prog: str | None = None) -> argparse.Namespace:
    prog = prog or "python -m trainwatch.trainer"  # (`trainwatch train` passes its own)
    p = argparse.ArgumentParser(
        prog=prog,
        description="Train a bundled model (lstm_freq, tiny_gpt, mlp), logging every step to "
        "RUN_DIR/metrics.jsonl for trainwatch; faults can be switched on to see the rules fire.",
        epilog=EPILOG.format(prog=prog), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", help="config file or packaged name, e.g. lstm_freq")
    p.add_argument("--run-dir", type=Path, help="where metrics, checkpoints and logs go")
    p.add_argument("--set", dest="sets", action="extend", nargs="+", default=[],
                   metavar="KEY=VALUE", help="override config keys, e.g. train.lr=3e-4")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in the run directory")
    p.add_argument("--device", choices=("cpu", "cuda"), help="override the config's device")
    p.add_argument("--list", action="store_true", help="list the packaged configs and exit")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config as YAML and exit")
    return p.parse_args(argv)


def fail(msg: str) -> int:
    print(f"trainwatch: {msg}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the trainer; returns the exit code (0 finished, 1 crashed, 2 usage, 130/143
    interrupted). ``prog`` names the command in ``--help`` (e.g. ``trainwatch train``)."""
    args = parse_args(argv, prog)
    if args.list:
        print("\n".join(list_packaged()))
        return 0
    run_dir_arg: Path | None = args.run_dir
    if run_dir_arg is None and os.environ.get(RUN_DIR_ENV):
        run_dir_arg = Path(os.environ[RUN_DIR_ENV])
    config_ref = args.config
    if config_ref is None:
        if args.resume and run_dir_arg is not None and (run_dir_arg / "config.yaml").is_file():
            config_ref = str(run_dir_arg / "config.yaml")  # the run's own config
        else:
            return fail("give a CONFIG (a YAML path or one of: "
                        f"{', '.join(list_packaged())}); see --help")
    try:
        cfg = load_config(config_ref, args.sets)
    except ConfigError as e:
        return fail(str(e))
    if args.device:
        cfg = _with_device(cfg, args.device)
    if args.print_config:
        from trainwatch.writer import to_yaml

        print(to_yaml(cfg.to_dict()), end="")
        return 0
    rank = int(os.environ.get("RANK", "0") or 0)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    under_torchrun = "WORLD_SIZE" in os.environ
    if cfg.fault.kind == "slow_rank" and cfg.fault.rank >= (world if under_torchrun
                                                             else cfg.dist.nproc):
        how = (f"torchrun started {world} processes" if under_torchrun
               else f"dist.nproc is {cfg.dist.nproc}: set dist.nproc={cfg.fault.rank + 1}")
        return fail(f"fault.rank: slow_rank slows rank {cfg.fault.rank}, but {how} (or choose a "
                    "lower fault.rank)")
    if cfg.dist.nproc > 1 and not under_torchrun:
        return launch_ranks(cfg.dist.nproc, list(sys.argv[1:] if argv is None else argv))
    if cfg.dist.nproc > 1 and world != cfg.dist.nproc:
        return fail(f"dist.nproc is {cfg.dist.nproc} but torchrun started {world} processes: "
                    f"use --nproc_per_node={cfg.dist.nproc}, or --set dist.nproc={world}")
    try:
        import torch  # the heavy import, only once the request is known to be sound
    except ImportError:
        return fail("the trainer needs PyTorch: pip install 'trainwatch[train]'")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        return fail("device: cuda was asked for but torch sees no CUDA device; use --device cpu")
    from trainwatch.trainer import dist
    from trainwatch.trainer.loop import Trainer

    info = dist.from_env()
    device = _device(cfg, info.local_rank)
    if cfg.threads > 0 and device.type == "cpu":
        torch.set_num_threads(cfg.threads)
    dist.init(info, device, cfg.dist.backend, cfg.dist.timeout_s)
    try:
        default_dir = Path("runs") / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = Path(dist.broadcast_str(info, str(run_dir_arg or default_dir)))
        problem = preflight(run_dir, rank)
        if problem:
            return fail(problem)
        if rank == 0:
            _announce(cfg, run_dir, world, device, args.resume)
        trainer = Trainer(cfg, run_dir, device, info)
        return trainer.run(resume=args.resume)
    except ConfigError as e:
        return fail(str(e))
    finally:
        dist.shutdown()


def launch_ranks(nproc: int, argv: list[str]) -> int:
    """Start the run as ``nproc`` processes under torch.distributed.run (torchrun), which this
    process becomes (``exec``: the same pid, so whoever started it, the TUI's supervisor or a
    shell, still holds the run and its signals reach torchrun, which passes them to the ranks).
    Returns only when the launch cannot happen."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return fail("the trainer needs PyTorch: pip install 'trainwatch[train]'")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "-m", "trainwatch.trainer", *argv]
    print(f"trainwatch: dist.nproc={nproc}: starting {nproc} ranks with torch.distributed.run",
          flush=True)
    sys.stderr.flush()
    try:
        os.execv(sys.executable, cmd)
    except OSError as e:
        return fail(f"could not start torch.distributed.run ({e.strerror or e}); run it "
                    f"yourself: torchrun --nproc_per_node={nproc} -m trainwatch.trainer "
                    + " ".join(argv))
    return 1  # (unreachable: execv does not return)


def preflight(run_dir: Path, rank: int = 0) -> str | None:
    """None when ``run_dir`` exists (or was created) and is writable, else the one-line problem."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".trainwatch-write-test.{os.getpid()}.{rank}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        why = e.strerror or str(e)
        return (f"run directory {run_dir} is not writable ({why}); pass a writable one with "
                "--run-dir DIR")
    return None


def _announce(cfg: Config, run_dir: Path, world: int, device: object, resume: bool) -> None:
    print(summary(cfg))
    print(f"  device {device}" + (f", {world} ranks (DDP)" if world > 1 else ""))
    print(f"  run directory {run_dir}  (watch it: trainwatch {run_dir})", flush=True)
    if cfg.eval.every <= 0:
        bar = "!" * 72
        print(f"{bar}\nWARNING: no validation set (eval.every = 0): overfitting cannot be seen; "
              f"set eval.every=N\n{bar}", file=sys.stderr, flush=True)
    if (run_dir / "metrics.jsonl").exists() and not resume:
        print(f"trainwatch: {run_dir / 'metrics.jsonl'} exists; this run is appended to it as a "
              "new segment (use --resume to continue from its checkpoint instead)",
              file=sys.stderr, flush=True)


def _with_device(cfg: Config, device: str) -> Config:
    import dataclasses

    return dataclasses.replace(cfg, device=device)


def _device(cfg: Config, local_rank: int) -> object:
    import torch

    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


if __name__ == "__main__":
    sys.exit(main())
