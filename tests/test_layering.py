"""The package arrows and the reproducibility rules, checked on the source itself.

Arrows point one way: node -> protocol -> repops_cupy, node -> contracts -> protocol.
protocol does no I/O and never sleeps. Inside repops_cupy, library reductions, products
and transcendentals may touch a value only where a comment says why it is exact.
"""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("repops_cupy", "protocol", "contracts", "node")
ALLOWED = {
    "repops_cupy": {"repops_cupy"},
    "protocol": {"repops_cupy", "protocol"},
    "contracts": {"protocol", "contracts"},
    "node": set(PACKAGES),
}
# modules that would give protocol I/O, concurrency or a clock of its own
PROTOCOL_FORBIDDEN = {"trio", "socket", "asyncio", "threading", "subprocess", "libp2p", "web3", "requests", "httpx", "select"}
# the one I/O helper protocol may have: writing and reading key files
PROTOCOL_IO_MODULES = {"keyfile.py"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _sources(package: str):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_arrows(package):
    bad = []
    for path in _sources(package):
        for name in _imports(path) & set(PACKAGES):
            if name not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_protocol_does_no_io():
    bad = []
    for path in _sources("protocol"):
        if path.name in PROTOCOL_IO_MODULES:
            continue
        text = path.read_text()
        for name in _imports(path) & PROTOCOL_FORBIDDEN:
            bad.append(f"{path.relative_to(ROOT)} imports {name}")
        for call in ("time.sleep(", "time.time(", "time.monotonic(", "open("):
            if re.search(rf"(?<![\w.]){re.escape(call)}", text):
                bad.append(f"{path.relative_to(ROOT)} calls {call}")
    assert not bad, "\n".join(bad)


NUMERIC_CALL = re.compile(
    r"\b(np|numpy|cp|cupy|torch|xp)\.(exp|log|log1p|expm1|tanh|erf|sigmoid|sum|mean|var|std|prod|cumsum|"
    r"dot|matmul|einsum|tensordot|inner|linalg\.norm)\("
)


def test_repops_numeric_path_has_no_unmarked_library_math():
    bad = []
    for path in _sources("repops_cupy"):
        if "roundlog" in path.parts:
            continue  # the rounding-log mode computes with torch by design; it rounds and logs instead
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if NUMERIC_CALL.search(code) and not re.search(r"#\s*(exact|reprod-ok)", line):
                bad.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not bad, "library math without '# exact: why':\n" + "\n".join(bad)
