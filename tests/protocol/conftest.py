"""Make `import protocol` mean the package, not this test folder.

Run as plain `pytest` (not `python -m pytest`), the rootless tests/ folder is put on
sys.path, and tests/protocol/ -- a folder without __init__.py -- would be imported
as a namespace package named `protocol`, shadowing the editable install (whose
finder runs after the path finder). With the repository root on sys.path the real
package is found first; under `python -m pytest` it is there already.
"""
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
_cached = sys.modules.get("protocol")
if _cached is not None and getattr(_cached, "__file__", None) is None:  # the namespace package got there first
    for _name in [n for n in sys.modules if n == "protocol" or n.startswith("protocol.")]:
        del sys.modules[_name]
