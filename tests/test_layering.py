"""The package arrows and the reproducibility rules, checked on the source itself.

Arrows point one way: node -> protocol -> repops_cupy, node -> contracts -> protocol.
protocol does no I/O (not even the file system) and never sleeps. Inside repops_cupy, library reductions, products
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
PROTOCOL_FORBIDDEN = {"trio", "socket", "asyncio", "threading", "subprocess", "libp2p", "web3", "requests", "httpx", "select",
                      "os", "pathlib", "io", "shutil", "tempfile", "glob", "sqlite3"}


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


# --- the bytes both parties hash have one owner ------------------------------------------
# A trainer writes these bytes and a referee recomputes them: one differing bit makes an
# honest party lose a dispute. So each layout is encoded once: the tensor hash, the named
# leaf, the state hash and the rounding log's leaf in repops_cupy/hashing.py, leaf and
# inner hashing in repops_cupy/merkle.py. Every other module calls them.
HASH_OWNERS = {"repops_cupy/hashing.py", "repops_cupy/merkle.py"}
# modules that call BLAKE3 for a digest of their own, under a domain tag no other module uses
BLAKE3_USERS = {
    "repops_cupy/graph.py": "the step graph's digest (gavel/step-graph/v1)",
    "repops_cupy/train.py": "a training program's identity (gavel/training-program/v1)",
    "repops_cupy/op_examples.py": "seeds of the op examples, from their names (not a commitment)",
    "repops_cupy/roundlog/engine.py": "per-site digests that locate a divergence (diagnostics, not committed)",
    "protocol/messages.py": "the dispute id (gavel/dispute-id/v1)",
    "protocol/jobs.py": "the job id (gavel/job-id/v1)",
    "protocol/referee.py": "the referee's transcript chain (gavel/transcript/v1)",
    "node/cli/dispute_sim.py": "identities of simulated parties, from their names",
    "node/testnet/plan.py": "seeds of a testnet's accounts, from the testnet seed",
    "node/roles/chain.py": "development account keys, from a seed",
}
# functions that encode a hashed layout: defined by an owner only, or as a wrapper that calls it
OWNED_FUNCTIONS = {"canonical_array", "hash_tensor", "state_leaf", "state_leaves", "state_root", "state_hash",
                   "sorted_names", "log_digest", "leaf_hash", "inner_hash", "merkle_root", "merkle_root_of_hashes"}
WRAPPERS = {
    ("protocol/commitments.py", "state_leaf"): "raises LocalProtocolError where hashing.state_leaf raises ValueError",
    ("protocol/commitments.py", "state_root"): "the root of protocol.state_tree, which refuses an empty state",
}
LOG_LEAF_NAME = "roundlog.log"


def _package_sources():
    for package in PACKAGES:
        for path in _sources(package):
            yield path.relative_to(ROOT).as_posix(), path


def hashed_layout_violations(root: pathlib.Path = ROOT) -> list[str]:
    """Every place under `root` that encodes a hashed layout outside its owner."""
    bad, blake3_users, tags = [], set(), {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(), filename=str(path))
            if rel not in HASH_OWNERS:  # module-level functions (a method may share a name and call the owner)
                bad += [f"{rel}:{node.lineno} defines {node.name}(): import it from {sorted(HASH_OWNERS)}"
                        for node in tree.body if isinstance(node, ast.FunctionDef)
                        and node.name in OWNED_FUNCTIONS and (rel, node.name) not in WRAPPERS]
            for node in ast.walk(tree):
                if isinstance(node, ast.Import) and any(a.name == "blake3" for a in node.names) \
                        or isinstance(node, ast.ImportFrom) and node.module == "blake3":
                    blake3_users.add(rel)
                if not (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))):
                    continue
                value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
                if isinstance(node.value, bytes) and value.startswith("gavel/"):
                    tags.setdefault(value, set()).add(rel)
                if rel in HASH_OWNERS:
                    continue
                if value == LOG_LEAF_NAME:
                    bad.append(f"{rel}:{node.lineno} spells the log leaf {value!r}: use hashing.LOG_LEAF")
                if value.startswith("<H"):
                    bad.append(f"{rel}:{node.lineno} packs a u16 length ({value!r}): the named leaf is hashing.state_leaf")
    for rel in sorted(blake3_users - HASH_OWNERS - set(BLAKE3_USERS)):
        bad.append(f"{rel} imports blake3: hash through repops_cupy.hashing / merkle, or list it in BLAKE3_USERS with why")
    for tag, users in sorted(tags.items()):
        if len(users) > 1:
            bad.append(f"domain tag {tag!r} is used by {sorted(users)}: one layout, one module")
    return bad


def test_hashed_layouts_have_one_owner():
    bad = hashed_layout_violations()
    assert not bad, "a second encoder of bytes both parties hash:\n" + "\n".join(bad)


def test_blake3_users_list_is_current():
    users = {rel for rel, path in _package_sources() if "blake3" in _imports(path)}
    stale = sorted(set(BLAKE3_USERS) - users)
    assert not stale, f"no longer import blake3, remove from BLAKE3_USERS: {stale}"


def test_hashed_layout_check_finds_a_second_encoder(tmp_path):
    (tmp_path / "repops_cupy").mkdir()
    (tmp_path / "repops_cupy" / "hashing.py").write_text('TAG = b"gavel/tensor/v1\\0"\n')
    (tmp_path / "repops_cupy" / "copy.py").write_text(
        'import blake3\nimport struct\nTAG = b"gavel/tensor/v1\\0"\n\n\n'
        'def hash_tensor(x):\n    return blake3.blake3(TAG + struct.pack("<H", 1)).digest()\n')
    for package in PACKAGES[1:]:
        (tmp_path / package).mkdir()
    bad = "\n".join(hashed_layout_violations(tmp_path))
    assert "copy.py:6 defines hash_tensor()" in bad and "packs a u16 length" in bad
    assert "repops_cupy/copy.py imports blake3" in bad and "domain tag 'gavel/tensor/v1\\x00'" in bad


# --- no import circles, no long modules -------------------------------------------------
# A circle is held together by an import at the bottom of a module or inside a function;
# both hide which module needs which. Every import counts here, those inside functions
# and under TYPE_CHECKING too.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}
MAX_MODULE_LINES = 600
LONG_MODULES: dict[str, str] = {}


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: pathlib.Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in its body), by dotted name.

    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at
    ``pkg`` (its ``__init__``); an import of a module outside the packages is left out.
    """
    paths = {module_name(root, p): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                found = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            else:
                continue
            for target in found:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[tuple[frozenset[str], list[str]]]:
    """Each group of modules that import each other round a circle, and one way round (a -> ... -> a)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    circles = []
    for group in groups:  # a shortest way round from the group's first module
        start = min(group)
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            if start in graph[path[-1]] and len(path) > 1:
                circles.append((frozenset(group), path + [start]))
                break
            for w in sorted(graph[path[-1]] & group - seen):
                seen.add(w)
                paths.append(path + [w])
    return circles


def test_no_import_circles():
    circles = import_circles(import_graph())
    bad = [" -> ".join(path) + (f" (the circle joins {sorted(group)})" if len(group) + 1 > len(path) else "")
           for group, path in circles if group not in KNOWN_CIRCLES]
    assert not bad, "import circles (every import counts, also those inside functions):\n" + "\n".join(bad)
    stale = [sorted(k) for k in KNOWN_CIRCLES if k not in {group for group, _ in circles}]
    assert not stale, f"no longer circles, remove from KNOWN_CIRCLES: {stale}"


# The cheat strategies are for tests and simulations: whoever starts a run that may cheat
# passes `node.cheats.STRATEGIES` in (node.runtime.Node(cheats=...) -> roles.runner.JobRun).
CHEAT_IMPORTERS = {
    "node.cli.dispute_sim": "the dispute simulator's cheating party",
    "node.cli.node": "gavel node start --cheat STRATEGY (a testnet's provider processes)",
    "node.testnet.plan": "which strategies a testnet's cheaters use",
    "node.testnet.inprocess": "an in-process testnet's cheating providers",
}


def test_honest_node_code_does_not_import_the_cheats():
    importers = {name for name, targets in import_graph().items() if "node.cheats" in targets}
    assert importers <= set(CHEAT_IMPORTERS), f"import node.cheats only to pass it in: {sorted(importers - set(CHEAT_IMPORTERS))}"
    stale = sorted(set(CHEAT_IMPORTERS) - importers)
    assert not stale, f"no longer import node.cheats, remove from CHEAT_IMPORTERS: {stale}"


def test_circle_check_finds_a_circle_held_by_an_import_inside_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("from .sub.c import f\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("def f():\n    from ..a import g\n    return g\n")
    (pkg / "d.py").write_text("import pkg.a\nimport numpy\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg.d"] == {"pkg.a"}
    assert import_circles(graph) == [({"pkg.a", "pkg.b", "pkg.sub.c"}, ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"])]
    (pkg / "sub" / "c.py").write_text("def f():\n    return 1\n")
    assert import_circles(import_graph(tmp_path, ("pkg",))) == []


def test_no_module_is_longer_than_the_budget():
    lengths = {rel: len(path.read_text().splitlines()) for rel, path in _package_sources()}
    long = [f"{rel}: {n} lines" for rel, n in sorted(lengths.items()) if n > MAX_MODULE_LINES and rel not in LONG_MODULES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them, or list them in LONG_MODULES with why):\n" \
        + "\n".join(long)
    stale = [rel for rel in LONG_MODULES if lengths.get(rel, 0) <= MAX_MODULE_LINES]
    assert not stale, f"no longer over {MAX_MODULE_LINES} lines, remove from LONG_MODULES: {stale}"
