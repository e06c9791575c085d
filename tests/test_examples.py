"""The examples run end to end at a tiny size, and the README's quickstart runs as written.

Each example exposes `main(argv)`; calling it in-process (rather than in a subprocess)
shares one JAX start-up. The examples need the `examples` extra (optax, matplotlib,
tqdm): without it these tests are skipped.
"""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_example(name: str):
    """Import `examples/<name>.py` as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", ROOT / "examples" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLES = [
    pytest.param(
        "neural_ode",
        ["--epochs", "2", "--batch-size", "8", "--quick"],
        ["neural_ode_loss.png", "neural_ode_fit.png"],
        "final loss",
        id="neural_ode",
    ),
    pytest.param(
        "damped_system",
        ["--quick"],
        ["damped_system.png"],
        "gradient error",
        id="damped_system",
        marks=pytest.mark.slow,
    ),
    pytest.param(  # jacrev through events, ~37 s: neural_ode runs an example by default
        "bouncing_ball",
        ["--quick", "--bounces", "2"],
        ["bouncing_ball.png"],
        "parameter error",
        id="bouncing_ball",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "memory_tradeoff",
        ["--quick"],
        ["memory_tradeoff.png"],
        "every c gives the same gradient",
        id="memory_tradeoff",
        marks=pytest.mark.slow,
    ),
    pytest.param(  # compiles a gradient and a Hessian-vector product: ~20 s
        "parameter_fit_newton",
        ["--quick"],
        ["parameter_fit_newton.png"],
        "squared Mahalanobis distance of the truth",
        id="parameter_fit_newton",
        marks=pytest.mark.slow,
    ),
    pytest.param(  # compiles a vmapped CDE solve and its gradient: ~40 s
        "neural_cde",
        ["--quick"],
        ["neural_cde_paths.png", "neural_cde_loss.png"],
        "held-out accuracy",
        id="neural_cde",
        marks=pytest.mark.slow,
    ),
    pytest.param(  # compiles a stiff solve and its gradient with Krylov solves: ~40 s
        "brusselator_2d",
        ["--quick", "--grid", "16", "--iterations", "2"],
        ["brusselator_2d_fit.png", "brusselator_2d_loss.png"],
        "fitted alpha",
        id="brusselator_2d",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.parametrize("name, argv, pngs, summary", EXAMPLES)
def test_example_runs(name, argv, pngs, summary, tmp_path, capsys):
    for requirement in ("matplotlib", "optax", "tqdm"):
        pytest.importorskip(requirement)
    load_example(name).main([*argv, "--out", str(tmp_path)])
    for png in pngs:
        assert (tmp_path / png).read_bytes().startswith(b"\x89PNG"), png
    assert summary in capsys.readouterr().out


@pytest.mark.parametrize(
    "flag, expected",
    [
        ("checkpoint", "CheckpointAdjoint"),
        ("backsolve", "BacksolveAdjoint"),
        ("interpolating", "InterpolatingAdjoint"),
    ],
)
def test_neural_ode_adjoint_flag(flag, expected):
    for requirement in ("matplotlib", "optax", "tqdm"):
        pytest.importorskip(requirement)
    adjoint = load_example("neural_ode").make_adjoint(flag, 3)
    assert type(adjoint).__name__ == expected
    assert adjoint.checkpoints == 3


def test_neural_ode_reversible_flag():
    for requirement in ("matplotlib", "optax", "tqdm"):
        pytest.importorskip(requirement)
    example = load_example("neural_ode")
    assert type(example.make_adjoint("reversible", None)).__name__ == "ReversibleAdjoint"
    assert type(example.make_solver("reversible")).__name__ == "Reversible"
    assert type(example.make_solver("checkpoint")).__name__ == "Tsit5"


def test_readme_quickstart(capsys):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert match is not None, "README.md has no ```python block"
    exec(compile(match.group(1), "README.md (quickstart)", "exec"), {"__name__": "__quickstart__"})
    assert capsys.readouterr().out.strip()
