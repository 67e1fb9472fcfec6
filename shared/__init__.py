"""mailstep runtime library shared by the Lambdas, the CLI and the local runtime.

This package is the only place that talks to boto3 (see ``shared/aws.py``).
"""
