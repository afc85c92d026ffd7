"""No test asserts how fast something ran (issue 14).

A bound on wall-clock time (``assert time.perf_counter() - start < 2``) fails when
the machine is busy, not when the code is wrong. A test says instead what the bound
stood for: which event came first, the reason the code itself reports (a
``PeerTimeout`` naming its bound, an error counter), or time moved by hand (a fake
clock, trio's ``MockClock``). A generous ``trio.fail_after`` or ``timeout=`` that only
stops a hung test is no assertion and is fine.

The scanner is a heuristic over each ``assert`` statement. It flags a comparison that
puts an upper bound on a duration, or a lower bound on a rate (something per
second), where a duration is

* a clock reading (``time.perf_counter()``, ``time.time()``, ``time.monotonic()``,
  their ``_ns`` forms, ``trio.current_time()``), or an expression holding one in a
  subtraction;
* a name that was assigned such a subtraction (``took = time.monotonic() - begun``);
* a name, attribute or string key that reads as one: ``elapsed``, ``duration``,
  ``rtt``, ``took``, ``latency``, ``seconds``, ``secs`` or ``ms`` as a word of it
  (``report["ping_ms"]``, ``timer.seconds["outer"]``).

A lower bound on a duration (``rtt > 0``) and an equality (a fake clock's exact
charge) are left alone: a slow machine cannot break them.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "current_time"}
CLOCK_MODULES = {"time", "trio"}
DURATION_WORDS = {"elapsed", "duration", "durations", "rtt", "took", "latency", "seconds", "secs", "ms"}
RATE_WORDS = {"throughput", "rate", "per_s", "per_sec", "per_second", "qps", "ops_s"}
# A setting or a simulated time, not a measurement: ``rules.move_timeout_ms``, ``r.simulated_ms``,
# a dispute's ``clock_ms`` (a party's time budget) and ``ruling_period``.
NOT_MEASURED_WORDS = {"timeout", "deadline", "limit", "window", "within", "bound", "budget", "period", "margin",
                      "clock", "simulated", "fake", "mock"}
# Calls whose value is no duration even when their argument is one: ``len(durations)``.
NOT_A_VALUE = {"len", "isinstance", "type", "hasattr", "id", "sorted", "set", "list"}

# Wall-clock bounds in files that others own, left for them to replace (issue 14):
# path relative to tests/, and the line of the assertion's text that stays allowed.
KNOWN: dict[str, set[str]] = {}


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in CLOCKS and isinstance(func.value, ast.Name) and func.value.id in CLOCK_MODULES
    # ``from time import perf_counter``; a bare ``time()`` is too common a name to guess at.
    return isinstance(func, ast.Name) and func.id in CLOCKS - {"time"}


def _words(identifier: str) -> set[str]:
    lowered = identifier.lower()
    words = set(re.split(r"[^a-z0-9]+", lowered)) - {""}
    # Keep two-word suffixes such as ``per_s`` whole as well.
    parts = lowered.split("_")
    words |= {"_".join(parts[i:i + 2]) for i in range(len(parts) - 1)}
    return words


def _labels(node: ast.AST) -> list[str]:
    """The names a side of a comparison reads: names, attributes and constant string keys.

    A called function's name is no label (``estimate_step_seconds(graph)`` computes
    from its argument, it does not time it); a method's receiver and the arguments are.
    """
    out: list[str] = []
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in NOT_A_VALUE:
            return out
        if isinstance(func, ast.Attribute):
            out += _labels(func.value)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            out += _labels(arg)
        return out
    if isinstance(node, ast.Name):
        out.append(node.id)
    elif isinstance(node, ast.Attribute):
        out.append(node.attr)
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        out.append(node.slice.value)
    for child in ast.iter_child_nodes(node):
        out += _labels(child)
    return out


def _reads_as(labels: list[str], words: set[str]) -> bool:
    return any(_words(label) & words and not _words(label) & NOT_MEASURED_WORDS for label in labels)


def _holds_clock_difference(node: ast.AST, derived: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub):
            if any(_is_clock_call(x) for x in ast.walk(sub)):
                return True
        if isinstance(sub, ast.Name) and sub.id in derived:
            return True
    return False


def _is_duration(node: ast.AST, derived: set[str]) -> bool:
    if _is_clock_call(node) or _holds_clock_difference(node, derived):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _is_duration(node.left, derived)  # a duration per item is still a duration
    return _reads_as(_labels(node), DURATION_WORDS)


def _is_rate(node: ast.AST, derived: set[str]) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _is_duration(node.right, derived):
        return True
    return _reads_as(_labels(node), RATE_WORDS)


def _derived_names(tree: ast.AST) -> set[str]:
    """Names (and the containers of subscripts) assigned a clock difference, followed through assignments."""
    derived: set[str] = set()
    assignments = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            assignments.append((node.targets, node.value))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            assignments.append(([node.target], node.value))
    changed = True
    while changed:
        changed = False
        for targets, value in assignments:
            if not _holds_clock_difference(value, derived):
                continue
            for target in targets:
                for sub in ast.walk(target):
                    base = sub
                    while isinstance(base, (ast.Subscript, ast.Attribute)):
                        base = base.value
                    if isinstance(base, ast.Name) and base.id not in derived:
                        derived.add(base.id)
                        changed = True
    return derived


def _speed_bounds(test: ast.AST, derived: set[str]) -> bool:
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for left, op, right in zip(sides, node.ops, sides[1:]):
            if isinstance(op, (ast.Lt, ast.LtE)):
                smaller, larger = left, right
            elif isinstance(op, (ast.Gt, ast.GtE)):
                smaller, larger = right, left
            else:
                continue
            if _is_duration(smaller, derived) or _is_rate(larger, derived):
                return True
    return False


def wallclock_asserts(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, text) of each ``assert`` in ``source`` that bounds how fast something ran."""
    tree = ast.parse(source, filename)
    derived = _derived_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and _speed_bounds(node.test, derived):
            found.append((node.lineno, ast.get_source_segment(source, node) or ast.unparse(node)))
    return sorted(found)


def scan(root: Path) -> list[str]:
    """``path:line: text`` for each wall-clock assertion under ``root``, less the known ones."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        for line, text in wallclock_asserts(path.read_text(encoding="utf-8"), str(path)):
            if text.splitlines()[0].strip() in KNOWN.get(relative, ()):
                continue
            hits.append(f"{relative}:{line}: {text}")
    return hits


def test_no_test_asserts_a_wall_clock_bound():
    hits = scan(TESTS)
    assert not hits, (
        "these assertions bound wall-clock time and fail on a busy machine; assert what the bound stands for "
        "(event order, the reason the code reports, a counter, a fake clock):\n" + "\n".join(hits))


# The forms the node tests used before issue 14, each of which failed or could fail on a busy machine.
OLD_FORMS = '''
import time

async def streams(stream, durations, start):
    start = time.perf_counter()
    await read_until_closed(stream, timeout=5)
    assert time.perf_counter() - start < 2  # refused at the header, not after a read timeout
    durations["stalled"] = time.perf_counter() - start
    assert 0.4 < durations["stalled"] < 2.5 and 0.7 < durations["idle"] < 2.5

async def host(b, a):
    rtt, card = await b.ping(a.peer_id)
    assert card.peer_id == str(a.peer_id) and rtt < 2
    start = time.perf_counter()
    assert time.perf_counter() - start < 1.0

def cli(report):
    assert report["roles"] == "provider,auditor" and report["ping_ms"] < 5000

def stage_timer(timer):
    assert 0.01 <= timer.seconds["outer"] < timer.seconds["inner"]

def submit():
    begun = time.monotonic()
    took = time.monotonic() - begun
    assert took < 45
    assert 45 > took
    per_step = took / 10
    assert per_step <= 1
    assert time.monotonic() < begun + 45

def throughput(n, elapsed, stats, durations):
    assert n / elapsed > 1000
    assert stats["mb_per_s"] >= 100
    assert max(durations.values()) < 2
'''

FINE_FORMS = '''
import time
import trio

async def fine(stream, counter, report, timer, rtt, durations, job):
    with trio.fail_after(20):
        await read_until_closed(stream, timeout=15)
    assert counter_value(counter, kind="FrameTooLarge") == 1
    assert isinstance(rtt, float) and rtt > 0
    assert report["state"] == "running" and report["ping_ms"] > 0
    assert timer.seconds["inner"] == 10 and timer.total() == 13
    assert len(durations) < 3
    deadline = int(time.time()) + 600
    assert job.deadline < deadline + 1
    assert job.move_timeout == 5 and job.steps < 10
    assert sorted(closed) == ["idle", "stalled"]
    assert r.simulated_ms > RULES.move_timeout_ms
    assert estimate_step_seconds(graph(1024)) > 10 * estimate_step_seconds(graph(64))
'''


def test_the_scanner_flags_each_old_form_and_nothing_else(tmp_path):
    flagged = [text for _, text in wallclock_asserts(OLD_FORMS)]
    expected = [line.strip() for line in OLD_FORMS.splitlines() if line.strip().startswith("assert ")]
    expected = [line.split("  #")[0] for line in expected]
    assert [text.split("  #")[0] for text in flagged] == expected
    assert wallclock_asserts(FINE_FORMS) == []
    # And ``scan`` finds them in a tree of test files, at their lines.
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "test_old.py").write_text(OLD_FORMS)
    (tmp_path / "test_fine.py").write_text(FINE_FORMS)
    hits = scan(tmp_path)
    assert len(hits) == len(expected) and all(hit.startswith("node/test_old.py:") for hit in hits)
    assert hits[0] == "node/test_old.py:7: assert time.perf_counter() - start < 2"
