"""Run one example's cells in this process and write what it printed, its results and
its error to the spec's `out` (a pickle).

    python -P tools/compat/example_child.py SPEC.json

Run by `examples.py` as a script, in a process of its own, with `diffrax` resolving to
the real package or to the rename package; it imports nothing from this repository.
"""

import json
import pickle
import sys
import traceback
from pathlib import Path

import numpy as np


def child(spec_path: str) -> None:
    """Run one example's cells in this process, then write what it
    printed, its results and its error, if any, to the spec's `out`."""
    spec = json.loads(Path(spec_path).read_text())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.show = lambda *args, **kwargs: None
    namespace: dict = {"__name__": "__main__"}
    report: dict = {"results": [], "error": None, "diffrax_file": None}
    index = 0
    try:
        for index, cell in enumerate(spec["cells"]):
            exec(compile(cell, f"<cell {index}>", "exec"), namespace)
            plt.close("all")
            for at, expression in spec["results"]:
                if at == index:
                    value = eval(expression, namespace)
                    report["results"].append((expression, to_numpy(value)))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        report["error"] = {
            "type": type(error).__name__,
            "cell": index,
            "message": str(error).strip()[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
    report["diffrax_file"] = getattr(sys.modules.get("diffrax"), "__file__", None)
    sys.stdout.flush()
    Path(spec["out"]).write_bytes(pickle.dumps(report))


def to_numpy(value):
    import jax

    leaves = jax.tree_util.tree_leaves(value)
    return [np.asarray(leaf) for leaf in leaves if hasattr(leaf, "shape") or np.isscalar(leaf)]


if __name__ == "__main__":
    child(sys.argv[1])
