"""Kernels XLA's CPU compiler generates for each case of the gradient compile table.

    python benchmarks/kernels.py

Compile time on the CPU is mostly code generation, about the same time per kernel for
both libraries (each kernel is an LLVM module), so the count explains the compile
table's ratios; unlike a compile time it does not vary from run to run. Each case is
compiled in a fresh process with XLA's compiler log on; the count is the number of
LLVM modules the log reports for the gradient's executable. It relies on that log line
(XLA's `cpu_compiler.cc`), and prints "?" where the log does not have it.
"""

import os
import subprocess
import sys

_MARK = "KERNELS-COMPILE-START"


def _one(index: int, lib: str) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_gradient as bg

    _, c, make, args, _ = bg.compile_cases()[index]
    lowered = jax.jit(make(lib, c)).trace(*args).lower()
    print(_MARK, file=sys.stderr, flush=True)
    _ = lowered.compile()


def count(index: int, lib: str) -> int | None:
    """Kernels of case `index` for `lib`, from XLA's log (None if it has no count)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="cpu_compiler=1")
    proc = subprocess.run(
        [sys.executable, __file__, "--one", str(index), lib],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    log = proc.stderr.split(_MARK, 1)
    if len(log) < 2:
        return None
    found = log[1].count("Running LLVM verifier")
    return found or None


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_gradient as bg

    print("| problem | checkpoints | odeckpt kernels | diffrax kernels | ratio |")
    print("|---|---|---|---|---|")
    for i, (label, c, *_) in enumerate(bg.compile_cases()):
        k = {lib: count(i, lib) for lib in ("odeckpt", "diffrax")}
        ours, theirs = k["odeckpt"], k["diffrax"]
        ratio = "?" if ours is None or theirs is None else f"{ours / theirs:.2f}"
        shown = {lib: "?" if v is None else str(v) for lib, v in k.items()}
        print(f"| {label} | {c} | {shown['odeckpt']} | {shown['diffrax']} | {ratio} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        _one(int(sys.argv[2]), sys.argv[3])
    else:
        main()
