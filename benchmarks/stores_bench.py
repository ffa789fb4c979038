"""Session-store benchmark: ``.venv/bin/python -m benchmarks.stores_bench --json OUT``.

The implementation lives in `contextwarden.stores.bench` (so `contextwarden bench stores` can
run it too); this module is the command-line entry point for the benchmarks folder.
"""

from __future__ import annotations

from contextwarden.stores.bench import main, run_stores_bench

__all__ = ["main", "run_stores_bench"]

if __name__ == "__main__":
    raise SystemExit(main())
