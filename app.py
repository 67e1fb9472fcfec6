#!/usr/bin/env python3
"""CDK entry point: ``python app.py`` (or ``npx aws-cdk@2 synth``) writes the mailstep stack to cdk.out/.

Needs no AWS credentials: the stack is environment-agnostic. Bundling the Lambda code runs
pip (package index access); synthesize with ``-c aws:cdk:bundling-stacks=[]`` to skip it.
"""

from stacks.mailstep_stack import build_app

if __name__ == "__main__":
    app, _ = build_app()
    app.synth()
