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
    "node/dispute_sim.py": "identities of simulated parties, from their names",
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
                if rel in HASH_OWNERS:
                    continue
                if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                    value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
                    if value == LOG_LEAF_NAME:
                        bad.append(f"{rel}:{node.lineno} spells the log leaf {value!r}: use hashing.LOG_LEAF")
                    if value.startswith("<H"):
                        bad.append(f"{rel}:{node.lineno} packs a u16 length ({value!r}): the named leaf is hashing.state_leaf")
                    if isinstance(node.value, bytes) and value.startswith("gavel/"):
                        tags.setdefault(value, set()).add(rel)
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
