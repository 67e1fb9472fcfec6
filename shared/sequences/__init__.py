"""Sequences: YAML files (``sequences/``) compiled to Step Functions state machines.

- model.py: the typed format; loader.py: YAML with line numbers; validate.py: the one
  validator (``load_catalog``); compiler.py: ASL; structure.py: structural check;
- engine.py: start/stop from events; steps.py: what the step Lambda does;
- evaluate.py: conditions and send windows in Python; sfn.py: the Step Functions adapter.

Imports ``core``, ``store`` and ``sending``; never ``broadcasts``, ``web`` or ``engagement``.
"""

from pathlib import Path

SEQUENCES_DIR = Path(__file__).resolve().parent.parent.parent / "sequences"
