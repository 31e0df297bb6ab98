"""The data of ``bench/leet_compare.py``: 20 training-like metrics x N steps, seeded, written
once as trainwatch JSONL and once as a W&B offline run (logged with ``wandb.log`` by a scratch
venv's python: wandb is never a project dependency), cached between runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

METRICS: tuple[str, ...] = (
    "loss", "val_loss", "lr", "grad_norm", "grad_norm_clipped", "throughput", "step_time",
    "data_time", "memory_gb", "accuracy", "perplexity", "weight_norm", "update_ratio",
    "loss_scale", "tokens_seen", "epoch", "aux_loss", "z_loss", "entropy", "gpu_util",
)
"""The 20 metrics every record carries (plain names, so trainwatch's role detection sees them)."""
RUN_ID = "leetbench"

WANDB_GENERATOR = '''\
import json, sys, wandb
src, out_dir, run_id = sys.argv[1:4]
settings = wandb.Settings(x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True,
                          console="off", disable_git=True, save_code=False,
                          x_save_requirements=False, silent=True)
run = wandb.init(mode="offline", dir=out_dir, project="leet-bench", id=run_id, name=run_id,
                 settings=settings)
with open(src, "rb") as f:
    for line in f:
        rec = json.loads(line)
        step = rec.pop("step")
        rec.pop("time", None)
        run.log(rec, step=step)
run.finish()
'''
"""Run by the scratch venv's python: replays the JSONL records through ``wandb.log``, so both
tools read the very same values. System stats are off: LEET would otherwise show extra series."""


def make_values(steps: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded training-like curves, one value per step for each of :data:`METRICS`."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, steps + 1, dtype=np.float64)
    x = s / steps
    warm = max(1, steps // 50)
    lr = np.where(s < warm, 3e-4 * s / warm, 3e-5 + 0.5 * (3e-4 - 3e-5) * (1 + np.cos(np.pi * x)))
    loss = (0.35 + 2.6 * np.exp(-6 * x)) * np.exp(rng.normal(0, 0.03, steps))
    grad = (0.4 + 1.2 * np.exp(-3 * x)) * np.exp(rng.standard_t(4, steps) * 0.1)
    tput = 12_000 * (1 + rng.normal(0, 0.02, steps))
    data_time = np.abs(rng.normal(0.004, 0.001, steps)) + (rng.random(steps) < 0.002) * 0.5
    weight = 80 + 15 * np.sqrt(x)
    scale = 2.0 ** (16 - np.minimum(4, np.cumsum(rng.random(steps) < 2e-4)))
    return {
        "loss": loss,
        "val_loss": 0.4 + 2.6 * np.exp(-5.5 * x) + rng.normal(0, 0.005, steps),
        "lr": lr,
        "grad_norm": grad,
        "grad_norm_clipped": np.minimum(grad, 1.0),
        "throughput": tput,
        "step_time": 4096 / tput + data_time,
        "data_time": data_time,
        "memory_gb": 9.0 + 3.0 * (1 - np.exp(-s / 50)) + rng.normal(0, 0.01, steps),
        "accuracy": np.clip(1 - loss / 3.2 + rng.normal(0, 0.01, steps), 0, 1),
        "perplexity": np.exp(loss),
        "weight_norm": weight,
        "update_ratio": lr * grad / weight * 1e3,
        "loss_scale": scale,
        "tokens_seen": s * 4096,
        "epoch": s / max(1, steps // 10),
        "aux_loss": 0.05 * np.exp(-2 * x) * np.exp(rng.normal(0, 0.05, steps)),
        "z_loss": 1e-4 * (1 + 0.2 * np.sin(s / 500)) + rng.normal(0, 1e-6, steps),
        "entropy": 2.0 + 4.0 * np.exp(-4 * x) + rng.normal(0, 0.02, steps),
        "gpu_util": np.clip(0.93 + rng.normal(0, 0.02, steps), 0, 1),
    }


def write_jsonl(path: Path, steps: int, seed: int) -> None:
    """One record per step, ``{"step": i, "time": ..., <20 metrics>}``, steps 1..N."""
    values = make_values(steps, seed)
    cols = [np.round(values[k], 8).tolist() for k in METRICS]
    t0 = 1.7e9
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for i in range(steps):
            rec: dict[str, float | int] = {"step": i + 1, "time": round(t0 + i * 0.35, 3)}
            rec.update(zip(METRICS, (c[i] for c in cols)))
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    tmp.rename(path)  # a half-written file from an interrupted run is never taken for data


@dataclass(frozen=True)
class Dataset:
    jsonl_run: Path
    """Run directory holding ``metrics.jsonl`` (what ``trainwatch PATH`` gets)."""
    wandb_run: Path
    """W&B offline run directory holding ``run-<id>.wandb`` (what ``wandb leet PATH`` gets)."""
    steps: int


def ensure_data(cache: Path, steps: int, seed: int, wandb_python: Path,
                env: dict[str, str]) -> Dataset:
    """Generate both copies of the data into ``cache`` unless a previous run already did."""
    base = cache / f"s{steps}-seed{seed}"
    jsonl_run = base / "runs" / "x"
    jsonl_run.mkdir(parents=True, exist_ok=True)
    jsonl = jsonl_run / "metrics.jsonl"
    if not jsonl.exists():
        t = time.perf_counter()
        write_jsonl(jsonl, steps, seed)
        print(f"wrote {jsonl} ({jsonl.stat().st_size / 1e6:.1f} MB) in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
    done = base / "wandb.done"
    if not done.exists():
        shutil.rmtree(base / "wandb", ignore_errors=True)
        gen = base / "gen_wandb.py"
        gen.write_text(WANDB_GENERATOR)
        t = time.perf_counter()
        print(f"logging {steps} steps with wandb.log (offline) ...", flush=True)
        subprocess.run([str(wandb_python), str(gen), str(jsonl), str(base), RUN_ID],
                       env=env, check=True)
        done.write_text("ok\n")
        print(f"  done in {time.perf_counter() - t:.1f} s", flush=True)
    found = sorted((base / "wandb").glob(f"offline-run-*-{RUN_ID}/run-{RUN_ID}.wandb"))
    if len(found) != 1:
        raise SystemExit(f"leet_compare: expected one run-{RUN_ID}.wandb under {base}/wandb, "
                         f"found {len(found)}: delete {base} and run again")
    return Dataset(jsonl_run=jsonl_run, wandb_run=found[0].parent, steps=steps)


def wandb_env(cache: Path) -> dict[str, str]:
    """Offline, silent, no telemetry, and every W&B file under ``cache``, not in $HOME."""
    return {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DIR": str(cache),
        "WANDB_CONFIG_DIR": str(cache / "wandb-config"),
        "WANDB_CACHE_DIR": str(cache / "wandb-cache"),
        "WANDB_DATA_DIR": str(cache / "wandb-data"),
    }
