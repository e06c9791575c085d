"""diffrax's ODE documentation examples that `examples.py` runs: data, one record each.

Each says where its code is, how it is shortened (the same for both runs), what is
compared and within which tolerance, and why that tolerance.
"""

import dataclasses

TIMING = r"Computation time: [-+.\deE]+|in [-+.\deE]+ seconds"


@dataclasses.dataclass(frozen=True)
class Example:
    """One documentation example: where its code is, how it is shortened, what is
    compared and within which tolerance (and why that tolerance)."""

    name: str
    source: str  # relative to diffrax's docs/
    results: tuple[tuple[int, str], ...] = ()  # (cell index, expression)
    # Shown side by side, not compared: counts that depend on the steps taken.
    reported: tuple[tuple[int, str], ...] = ()
    differs: str = ""  # a known difference, shown with the comparison
    shorten: tuple[tuple[str, str], ...] = ()  # (text, replacement)
    rtol: float = 1e-6
    atol: float = 1e-9
    why_tolerance: str = "float64, the same algorithm: round-off only"
    ignore: str = TIMING
    blocks: tuple[int, ...] = ()  # getting-started.md: which python blocks
    needs: tuple[str, ...] = ()  # modules the example imports beyond the usual


F32 = "float32 (JAX's default): the two libraries' round-off differs at ~1e-7 relative"
TRAINING = (
    "float32 training: round-off differences in the gradients (~1e-7) grow over the "
    "optimiser's steps; the tolerance bounds that growth over the shortened run"
)

_TS = "jnp.arange(0, 5.0, 0.01)"
KALMAN_DATA = (
    "simulate_lti_system(harmonic_oscillator(0.3), jnp.array([1.0, 0.0]), "
    f"{_TS}, std_measurement_noise=1.0)"
)
KALMAN_FILTER = (
    "harmonic_oscillator(0.7), jnp.array([0.0, 0.0]), jnp.diag(jnp.ones((2,))) * 10.0, "
    "jnp.diag(jnp.ones((2,))) * 0.1, jnp.diag(jnp.ones((1,)))"
)

_X64 = 'import optax; jax.config.update("jax_enable_x64", True)'


EXAMPLES = (
    Example(
        "getting started",
        "usage/getting-started.md",
        results=((0, "sol.ts"), (0, "sol.ys")),
        blocks=(0,),
        rtol=1e-5,
        atol=1e-7,
        why_tolerance=F32,
    ),
    Example(
        "continuous normalising flow",
        "examples/continuous_normalising_flow.ipynb",
        shorten=(("steps=10000,", "steps=20,"), ("print_every=100,", "print_every=4,")),
        rtol=1e-3,
        atol=1e-5,
        why_tolerance=TRAINING,
        needs=("imageio", "scipy"),
    ),
    Example(
        "coupled ODEs",
        "examples/coupled_odes.ipynb",
        results=((0, "sol.ts"), (0, "sol.ys")),
        rtol=1e-5,
        atol=1e-5,
        why_tolerance=F32 + " (values up to ~1e2)",
    ),
    Example(
        "forcing",
        "examples/forcing.ipynb",
        results=((0, "sol.ys"), (2, "grads")),
        rtol=1e-5,
        atol=1e-6,
        why_tolerance=F32,
    ),
    Example(
        "Hessian",
        "examples/hessian.ipynb",
        results=((0, "run(y0)"),),
        rtol=1e-4,
        atol=1e-6,
        why_tolerance=F32 + "; second derivatives through 1400 steps amplify it",
    ),
    Example(
        "Kalman filter",
        "examples/kalman_filter.ipynb",
        # What `main()` computes and plots, with its default arguments: the simulated
        # system `(xs, ys)` and the filter's estimate `xhats`.
        results=(
            (5, KALMAN_DATA),
            (5, f"KalmanFilter({KALMAN_FILTER})({_TS}, ({KALMAN_DATA})[1])"),
        ),
        rtol=1e-4,
        atol=1e-6,
        why_tolerance=F32 + "; 500 constant Dopri5 steps, and a 2x2 inverse per evaluation",
    ),
    Example(
        "latent ODE",
        "examples/latent_ode.ipynb",
        shorten=(("steps=250,", "steps=30,"),),
        rtol=1e-3,
        atol=1e-4,
        why_tolerance=TRAINING,
    ),
    Example(
        "neural ODE",
        "examples/neural_ode.ipynb",
        results=((6, "jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))"),),
        shorten=(
            ("steps_strategy=(500, 500),", "steps_strategy=(100, 100),"),
            ("print_every=100,", "print_every=20,"),
        ),
        rtol=1e-2,
        atol=1e-2,
        why_tolerance=(
            "the example solves at rtol=1e-3, and the two libraries' adaptive steps "
            "differ at round-off level (the first loss of each phase agrees closely); "
            "the optimiser's 200 steps amplify that: losses to 1e-2 relative, the O(1) "
            "parameters to 1e-2 absolute"
        ),
    ),
    Example(
        "nonlinear heat PDE",
        "examples/nonlinear_heat_pde.ipynb",
        results=((3, "sol.ys.vals"), (6, "sol.ys.vals")),
        rtol=1e-8,
        atol=1e-10,
        why_tolerance="float64 at rtol=atol=1e-10: round-off only",
    ),
    Example(
        "steady state",
        "examples/steady_state.ipynb",
        results=((3, "model.steady_state"),),
        rtol=1e-3,
        atol=1e-6,
        why_tolerance=(
            "the example's own: its steady-state event stops the solve where "
            "|f| <= 1e-3 |y| + 1e-6 (the controller's rtol, atol), so the steady state "
            "is defined to ~1e-3; float32 round-off moves where the event fires"
        ),
    ),
    Example(
        "stiff ODE",
        "examples/stiff_ode.ipynb",
        results=((4, "sol.ys"),),
        reported=((4, "sol.stats['num_steps']"),),
        ignore=TIMING + r"|Took \d+ steps",
        rtol=1e-6,
        atol=1e-6,
        why_tolerance=(
            "100 times the example's rtol and atol (1e-8): these bound each step's "
            "local error, not the global error, which is larger for both libraries "
            "(SaveAt(ts) values between Kvaerno5's long steps come from its dense "
            "output; `tests/test_stiff.py::test_robertson_diffrax_example` holds "
            "odeckpt's within 1e-6 of SciPy's Radau at rtol 1e-12), and the two take "
            "different steps"
        ),
        differs=(
            "Kvaerno5 takes fewer, longer steps here (`num_steps` below), as diffrax "
            "itself did when the example's stored output was made (34 steps); diffrax "
            "0.7.2's Newton iterations, at the controller's tolerances, fail and reject "
            "steps where odeckpt's, with their own tolerances, converge"
        ),
    ),
    Example(
        "getting started: CDE",
        "usage/getting-started.md",
        results=((0, "sol.ts"), (0, "sol.ys")),
        blocks=(3,),
        rtol=1e-5,
        atol=1e-7,
        why_tolerance=F32,
    ),
    Example(
        "neural CDE",
        "examples/neural_cde.ipynb",
        rtol=1e-1,
        atol=1e-2,
        why_tolerance=(
            "at the example's rtol=1e-3 an adaptive solve of this neural CDE is "
            "discontinuous in its inputs: round-off flips accept/reject decisions, so two "
            "implementations take different steps and end about rtol apart; the example "
            "passes dt0=None, for which "
            "diffrax 0.7 starts at 0.01 and odeckpt by Hairer-Norsett-Wanner's heuristic "
            "(`docs/diffrax.md`); and training amplifies both. The next entry solves "
            "to rtol=1e-8 in float64, where the solutions no longer depend on the steps, "
            "and compares to 1e-4"
        ),
    ),
    Example(
        "neural CDE, float64, rtol 1e-8",
        "examples/neural_cde.ipynb",
        shorten=(
            ("import optax  # https://github.com/deepmind/optax", _X64),
            ("rtol=1e-3, atol=1e-6", "rtol=1e-8, atol=1e-10"),
        ),
        rtol=1e-4,
        atol=1e-6,
        why_tolerance=(
            "float64 (`jax_enable_x64`) solves at rtol=1e-8, atol=1e-10: the solutions "
            "no longer depend on which steps each library takes, and the losses over "
            "the 20 training steps are asked to match to 1e-4"
        ),
    ),
    Example(
        "symbolic regression",
        "examples/symbolic_regression.ipynb",
        needs=("pysr", "sympy2jax"),
    ),
)

# Notebooks and getting-started blocks out of ODE scope.
OUT_OF_SCOPE = {
    "examples/neural_sde.ipynb": "SDE",
    "examples/sde_example.ipynb": "SDE",
    "examples/underdamped_langevin_example.ipynb": "SDE",
    "getting started, blocks 2-3": (
        "an SDE (`ControlTerm` with a Brownian path) and a fragment (`solver = ...`)"
    ),
}
