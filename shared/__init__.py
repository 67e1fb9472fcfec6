"""mailstep's runtime library: exactly what the Lambdas import (and the CLI reuses).

Domain packages, lowest first (docs/architecture.md, "Package layout"; checked by
tests/unit/test_import_contract.py): ``core`` <- ``store`` <- ``sending`` <- ``sequences``
<- ``broadcasts`` / ``web`` <- ``engagement``. Only adapters touch boto3 clients.
"""
