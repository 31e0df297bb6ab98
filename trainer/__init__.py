"""The bundled PyTorch trainer: real training with switchable faults, for trainwatch to watch.

Entry points:

* ``python -m trainwatch.trainer CONFIG [--run-dir DIR] [--set k=v ...] [--resume]
  [--device cpu|cuda]`` (:func:`trainwatch.trainer.__main__.main`), also under ``torchrun``;
* ``python -m trainwatch.trainer.supervise --run-dir DIR -- CMD ...`` and the
  :mod:`~trainwatch.trainer.supervise` API (``start_run``, ``read_process``, ``stop_run``);
* :func:`trainwatch.trainer.demo.launch_demo`.

Only the modules that train (``loop``, ``tasks``, ``task_*``, ``faults``, ``checkpoint``,
``dist``, ``gradnorm``) import torch; this package, ``config``, ``schedule``, ``supervise``,
``demo``, ``steplog`` and ``sysmem`` do not, so the CLI and the TUI can use them without it.
"""
