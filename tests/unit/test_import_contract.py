"""The package layout's dependency direction (docs/architecture.md, "Package layout").

Given every module of the project, when its imports are read, then no import crosses the
direction the layout allows. The checker is also run on a planted forbidden import, so this
test is known to fail when the contract is broken.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What each part of the project may import of mailstep (besides itself).
SHARED_LAYERS: dict[str, set[str]] = {
    "core": set(),
    "store": {"core"},
    "sending": {"core", "store"},
    "sequences": {"core", "store", "sending"},
    "broadcasts": {"core", "store", "sending", "sequences"},
    "consent": {"core", "store", "sending", "sequences"},
    "web": {"core", "store", "sending", "sequences", "consent"},
    "engagement": {"core", "store", "sending", "sequences", "web", "consent"},
    "webhooks": {"core", "store"},
    "reputation": {"core", "store", "sending", "sequences", "broadcasts"},
}
TOP_LEVEL: dict[str, set[str]] = {
    "shared": {"shared"},
    "functions": {"shared"},
    "ops": {"shared"},
    "stacks": {"shared", "stacks"},
    # The embedded AWS, the console, the MCP server and the demo's story are parts of their own;
    # the commands (cli) start them.
    "local_aws": {"ops", "shared"},
    "console": {"ops", "shared"},
    "mcp_server": {"ops", "shared"},
    "demo": {"local_aws", "ops", "shared"},
    "cli": {"cli", "ops", "shared", "local_aws", "console", "mcp_server", "demo"},
}
OURS = {*TOP_LEVEL, "bench", "tests"}


def imported_modules(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
            # ``from shared import store`` imports the package shared.store
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def violations(path: Path, source: str) -> list[str]:
    relative = path.relative_to(ROOT).parts
    top = relative[0]
    layer = relative[1] if top == "shared" and len(relative) > 2 else None
    problems = []
    for line, module in imported_modules(source):
        parts = module.split(".")
        if parts[0] not in OURS:
            continue
        where = f"{path.relative_to(ROOT)}:{line} imports {module}"
        if parts[0] not in TOP_LEVEL.get(top, OURS) and parts[0] != top:
            problems.append(where)
        elif top == "shared" and len(parts) > 1 and parts[1] in SHARED_LAYERS:
            if layer is None:
                problems.append(where + " (the shared root holds only packages)")
            elif parts[1] != layer and parts[1] not in SHARED_LAYERS[layer]:
                problems.append(where)
    return problems


def project_modules() -> list[Path]:
    return [path for top in TOP_LEVEL for path in sorted((ROOT / top).rglob("*.py"))]


def test_no_module_imports_against_the_direction() -> None:
    problems = [p for path in project_modules() for p in violations(path, path.read_text())]
    assert problems == []


def test_shared_root_holds_only_packages() -> None:
    root_files = sorted(p.name for p in (ROOT / "shared").glob("*.py"))
    packages = sorted(p.name for p in (ROOT / "shared").iterdir() if (p / "__init__.py").is_file())
    assert root_files == ["__init__.py"]
    assert set(packages) == set(SHARED_LAYERS)


def test_every_package_says_what_it_owns() -> None:
    parts = ["ops", "local_aws", "console", "mcp_server", "demo"]
    for package in [*(ROOT / "shared" / name for name in SHARED_LAYERS), *(ROOT / part for part in parts)]:
        docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert docstring and len(docstring) > 60, package


def test_the_checker_catches_a_forbidden_import() -> None:
    cases = {
        ROOT / "shared" / "core" / "settings.py": "from shared.store.keys import profile_key\n",
        ROOT / "shared" / "store" / "stats.py": "import shared.sending.rendering\n",
        ROOT / "shared" / "sending" / "pipeline.py": "from shared import engagement\n",
        ROOT / "shared" / "web" / "ingest.py": "from shared.broadcasts.model import Audience\n",
        ROOT / "shared" / "broadcasts" / "worker.py": "from ops.admin import Admin\n",
        ROOT / "functions" / "api" / "handler.py": "from local_aws import runtime\n",
        ROOT / "ops" / "admin.py": "    from cli.target import Target\n".strip() + "\n",
        ROOT / "shared" / "core" / "specs.py": "from console.site import Console\n",
        ROOT / "shared" / "store" / "keys.py": "from local_aws.ses import LocalSes\n",
        ROOT / "functions" / "sender" / "handler.py": "import console\n",
        ROOT / "stacks" / "mailstep_stack.py": "from local_aws import runtime\n",
        ROOT / "ops" / "targets.py": "from console import app\n",
        ROOT / "console" / "pages.py": "from local_aws.ses import read_outbox\n",
        ROOT / "local_aws" / "ses.py": "from cli.target import resolve\n",
    }
    for path, source in cases.items():
        assert violations(path, source), (path, source)
    assert violations(ROOT / "shared" / "engagement" / "replies.py", "from shared.web import ingest\n") == []


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_two_modules_import_each_other() -> None:
    """Given every module, when the modules each one imports (at any depth of the file, type-only
    imports included) are drawn as arrows, then no arrow has a partner running back."""
    modules = {module_name(path): path for path in project_modules()}
    arrows = {
        (name, target)
        for name, path in modules.items()
        for _, imported in imported_modules(path.read_text())
        for target in [imported]
        if target in modules and target != name and not name.startswith(target + ".")
    }
    pairs = sorted((a, b) for a, b in arrows if (b, a) in arrows and a < b)
    assert pairs == []
