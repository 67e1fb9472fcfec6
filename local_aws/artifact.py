"""The deployment artifact the local runtime runs: the synthesized template and the bundled
Lambda code asset, exactly as ``cdk deploy`` would upload them.

:func:`build` synthesizes the app (``python app.py``, bundling on: pip installs the Lambda
dependencies for the Lambda platform and Python 3.12) into a cache folder keyed by a hash
of everything that goes into the stack, so an unchanged checkout reuses its last build.
:func:`lambda_python` finds the Python 3.12 interpreter that execution environments run on
(the Lambda runtime's version), and :func:`runtime_libraries` installs the boto3/botocore
that the Lambda Python runtime provides beside the asset, at the versions of requirements.lock,
compiled to bytecode like the asset (a provided library is not compiled at each cold start).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.core import specs

ROOT = Path(__file__).resolve().parents[1]
LAMBDA_PYTHON_VERSION = specs.LAMBDA_RUNTIME.removeprefix("python")  # "3.12"
# Inputs of the synthesized stack (sources, definitions, configuration, pins).
_INPUTS = (
    "app.py", "cdk.json", "pyproject.toml", "requirements.lock", "topics.yaml",
    "stacks", "shared", "functions", "templates", "sequences",
)  # fmt: skip
LOCK_FILE = "requirements.lock"
# What the Lambda Python runtime provides besides the standard library (at the lock's versions).
RUNTIME_PACKAGES = ("boto3", "botocore")
KEEP_BUILDS = 3


class ArtifactError(RuntimeError):
    """The artifact cannot be built or run here (the message says how to fix it)."""


@dataclass(frozen=True)
class Artifact:
    template: dict[str, Any]
    template_path: Path
    asset_dir: Path  # the Lambda code asset (what the functions' Code points at)
    runtime_dir: Path  # boto3/botocore as the Lambda Python runtime provides them
    python: Path  # the Python 3.12 interpreter of the execution environments
    seconds: float  # how long build() took (0 when reused)

    @property
    def import_path(self) -> list[str]:
        """A function's import path, like Lambda's: the task root first, then the runtime."""
        return [str(self.asset_dir), str(self.runtime_dir)]


def build_dir() -> Path:
    return Path(os.environ.get("MAILSTEP_BUILD_DIR") or ROOT / ".mailstep" / "build")


def lambda_python() -> Path:
    """The Python 3.12 interpreter: ``MAILSTEP_LAMBDA_PYTHON``, ``python3.12`` on PATH, or pyenv's."""
    candidates: list[str] = []
    if os.environ.get("MAILSTEP_LAMBDA_PYTHON"):
        candidates.append(os.environ["MAILSTEP_LAMBDA_PYTHON"])
    on_path = shutil.which(f"python{LAMBDA_PYTHON_VERSION}")
    if on_path:
        candidates.append(on_path)
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates += sorted(
        glob.glob(f"{pyenv_root}/versions/{LAMBDA_PYTHON_VERSION}.*/bin/python{LAMBDA_PYTHON_VERSION}"),
        reverse=True,
    )
    for candidate in candidates:
        path = Path(candidate)
        if path.exists() and _version_of(path) == LAMBDA_PYTHON_VERSION:
            return path
    raise ArtifactError(
        f"Python {LAMBDA_PYTHON_VERSION} (the Lambda runtime {specs.LAMBDA_RUNTIME}) is needed to run the "
        f"functions locally and was not found. Install it (`pyenv install {LAMBDA_PYTHON_VERSION}`, or "
        f"`apt-get install python{LAMBDA_PYTHON_VERSION}`), or point MAILSTEP_LAMBDA_PYTHON at it."
    )


def _version_of(python: Path) -> str:
    try:
        out = subprocess.run(  # noqa: S603 - an interpreter path we found
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def inputs_hash(root: Path = ROOT, context: dict[str, Any] | None = None) -> str:
    digest = hashlib.sha256(json.dumps(context or {}, sort_keys=True).encode())
    for name in _INPUTS:
        top = root / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in paths:
            relative = path.relative_to(root)
            if "__pycache__" in relative.parts or any(p.startswith(".") for p in relative.parts):
                continue
            digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent runtimes (test workers) build once
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _stack_template(outdir: Path) -> Path:
    manifest = json.loads((outdir / "manifest.json").read_text())
    for artifact in manifest.get("artifacts", {}).values():
        if artifact.get("type") == "aws:cloudformation:stack":
            return outdir / artifact["properties"]["templateFile"]
    raise ArtifactError(f"no stack in {outdir / 'manifest.json'}")


def asset_dir_of(template: dict[str, Any], outdir: Path) -> Path:
    """The staged code asset of the template's functions (they share one asset)."""
    keys = {
        str(r["Properties"]["Code"]["S3Key"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    }
    if len(keys) != 1:
        raise ArtifactError(f"expected one code asset for every function, found {sorted(keys)}")
    folder = outdir / f"asset.{keys.pop().removesuffix('.zip')}"
    if not (folder / "functions").is_dir():
        raise ArtifactError(f"the code asset {folder} was not bundled (synthesized with bundling skipped?)")
    return folder


def synthesize(outdir: Path, root: Path = ROOT, context: dict[str, Any] | None = None) -> None:
    """``python app.py`` into ``outdir``, with bundling (pip for the Lambda platform)."""
    env = {**os.environ, "CDK_OUTDIR": str(outdir), "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    if context:
        env["CDK_CONTEXT_JSON"] = json.dumps(context)
    result = subprocess.run(  # noqa: S603 - this interpreter, the project's app.py
        [sys.executable, str(root / "app.py")], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ArtifactError(f"synthesizing the stack failed:\n{(result.stderr or result.stdout)[-4000:]}")


def runtime_pins(root: Path = ROOT) -> list[str]:
    """``boto3==...``, ``botocore==...`` as requirements.lock pins them."""
    lock = (root / LOCK_FILE).read_text()
    pins = []
    for name in RUNTIME_PACKAGES:
        found = re.search(rf"^{name}==([^\s;]+)\s*$", lock, re.MULTILINE)
        if not found:
            raise ArtifactError(f"{LOCK_FILE} pins no {name} (run `make lock`)")
        pins.append(f"{name}=={found[1]}")
    return pins


def runtime_libraries(cache: Path, root: Path = ROOT) -> Path:
    """boto3/botocore for the execution environments, installed once per locked version (what
    they need at the lock's versions too), compiled for the Lambda runtime's Python."""
    pins = runtime_pins(root)
    lock_id = hashlib.sha256((root / LOCK_FILE).read_bytes()).hexdigest()[:8]
    compiled_for = "cp" + LAMBDA_PYTHON_VERSION.replace(".", "")
    folder = cache / "-".join(["lambda-runtime", *(p.replace("==", "") for p in pins), lock_id, compiled_for])
    if (folder / ".complete").exists():
        return folder
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "--platform", "manylinux2014_x86_64", "--implementation", "cp",
        "--python-version", LAMBDA_PYTHON_VERSION, "--only-binary=:all:", "--target", str(partial),
        "--constraint", str(root / LOCK_FILE), *pins,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise ArtifactError(f"installing the Lambda runtime's {', '.join(pins)} failed:\n{result.stderr}")
    # As stacks.constructs.functions.compile_bytecode does for the asset (why unchecked-hash: there).
    compiled = subprocess.run(  # noqa: S603 - the Lambda interpreter's compileall
        [str(lambda_python()), "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
         str(partial)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if compiled.returncode != 0:
        raise ArtifactError(
            f"compiling the Lambda runtime's libraries failed:\n{compiled.stdout}{compiled.stderr}"
        )
    (partial / ".complete").touch()
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder


def build(root: Path = ROOT, context: dict[str, Any] | None = None, cache: Path | None = None) -> Artifact:
    """The artifact of this checkout: reused when its inputs are unchanged, else synthesized."""
    python = lambda_python()
    cache = cache or build_dir()
    context = {**specs.LOCAL_SYNTH_CONTEXT, **(context or {})}
    started = time.perf_counter()
    with _locked(cache):
        outdir = cache / f"cdk.out-{inputs_hash(root, context)}"
        done = outdir / ".complete"
        reused = done.exists()
        if not reused:
            shutil.rmtree(outdir, ignore_errors=True)
            synthesize(outdir, root, context)
            done.touch()
            _prune(cache)
        runtime_dir = runtime_libraries(cache, root)
    template_path = _stack_template(outdir)
    template = json.loads(template_path.read_text())
    return Artifact(
        template=template,
        template_path=template_path,
        asset_dir=asset_dir_of(template, outdir),
        runtime_dir=runtime_dir,
        python=python,
        seconds=0.0 if reused else time.perf_counter() - started,
    )


def _prune(cache: Path) -> None:
    for pattern in ("cdk.out-*", "lambda-runtime-*"):
        builds = sorted(cache.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in builds[KEEP_BUILDS:]:
            shutil.rmtree(old, ignore_errors=True)
