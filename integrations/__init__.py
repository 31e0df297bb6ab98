"""Live from the frameworks: callbacks and a logger that write trainwatch's run format as
training runs.

The frameworks' own files reach the disk late (HF Trainer's ``trainer_state.json`` at each
checkpoint, Lightning's ``CSVLogger`` every 100 steps, Keras' ``CSVLogger`` once per epoch); these
write every record the moment the framework logs it, through :class:`trainwatch.RunWriter`:

* :mod:`trainwatch.integrations.hf`: ``TrainwatchCallback``, a ``transformers.TrainerCallback``;
* :mod:`trainwatch.integrations.lightning`: ``TrainwatchLogger``, a Lightning ``Logger``;
* :mod:`trainwatch.integrations.keras`: ``TrainwatchCallback``, a Keras 3 ``Callback``.

Each module imports its framework when it is imported itself; this package imports none of them
(``import trainwatch.integrations`` stays as light as ``import trainwatch``).
"""

from __future__ import annotations
