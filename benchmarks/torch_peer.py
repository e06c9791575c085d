"""torchdiffeq peer for the neural-ODE and damped-system benchmark sections.

Run by the Python of a separate environment holding torch and torchdiffeq (torch never
enters odeckpt's environment); `bench_neural_ode.py` and `bench_damped.py` launch it:

    python -m venv benchmarks/.torch-env
    benchmarks/.torch-env/bin/pip install torch==2.13.0 torchdiffeq numpy
    benchmarks/.torch-env/bin/python benchmarks/torch_peer.py SPEC.json

`SPEC.json` describes the problems (MLP weights, data, damped matrices, tolerances); the
results are printed on stdout as one JSON object. Only torch, torchdiffeq and numpy
are imported here: the script must not import JAX or odeckpt.

Conventions, as on the JAX side: times are medians of repeated calls after a warm-up
call; vector-field evaluations are counted in runs separate from the timed ones (a
Python counter in the vector field); float64 throughout.
"""

import json
import os
import statistics
import sys
import time

# OpenMP threads that spin while waiting slow torch down ~30x on a loaded machine with
# as many threads as CPUs; waiting passively costs nothing measurable on an idle one.
# Read when torch loads, so set before importing it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchdiffeq  # noqa: E402

DTYPE = torch.float64


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_seconds(fn, device, repeats: int, budget: float) -> float:
    """Median wall time of `fn()` over `repeats` calls (fewer if over `budget` s)."""
    fn()  # warm-up
    _sync(device)
    samples, start = [], time.perf_counter()
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        _sync(device)
        samples.append(time.perf_counter() - tic)
        if time.perf_counter() - start > budget and len(samples) >= 3:
            break
    return statistics.median(samples)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:80]}" if text else type(error).__name__


# ----------------------------------------------------------------------------------
# Neural ODE: one training step of an MLP vector field over a batch


class MLP(torch.nn.Module):
    """Linear -> tanh -> ... -> Linear, weights given as [(W, b), ...] (W: out x in)."""

    def __init__(self, layers, device):
        super().__init__()
        self.linears = torch.nn.ModuleList()
        for weight, bias in layers:
            weight = torch.tensor(np.asarray(weight), dtype=DTYPE, device=device)
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0], dtype=DTYPE, device=device)
            with torch.no_grad():
                linear.weight.copy_(weight)
                linear.bias.copy_(torch.tensor(np.asarray(bias), dtype=DTYPE, device=device))
            self.linears.append(linear)
        self.evaluations = 0

    def forward(self, t, y):
        self.evaluations += 1
        for linear in self.linears[:-1]:
            y = torch.tanh(linear(y))
        return self.linears[-1](y)


def neural_ode(spec: dict, device) -> dict:
    """Loss, weight gradients, time and evaluations of one training step per method."""
    y0 = torch.tensor(np.asarray(spec["y0"]), dtype=DTYPE, device=device)
    targets = torch.tensor(np.asarray(spec["targets"]), dtype=DTYPE, device=device)
    ts = torch.tensor([0.0, *spec["ts"]], dtype=DTYPE, device=device)
    tol = dict(rtol=spec["rtol"], atol=spec["atol"], method="dopri5")
    tol["options"] = dict(max_num_steps=spec["max_steps"])
    model = MLP(spec["layers"], device)
    results = {}
    for method, odeint in (
        ("odeint", torchdiffeq.odeint),
        ("odeint_adjoint", torchdiffeq.odeint_adjoint),
    ):

        def step(odeint=odeint):
            model.zero_grad()
            ys = odeint(model, y0, ts, **tol)[1:].transpose(0, 1)  # (batch, time, dim)
            loss = torch.mean((ys - targets) ** 2)
            loss.backward()
            return loss

        seconds = _median_seconds(step, device, spec["repeats"], spec["budget_seconds"])
        with torch.no_grad():
            model.evaluations = 0
            odeint(model, y0, ts, **tol)
            forward = model.evaluations
        model.evaluations = 0
        loss = step()
        total = model.evaluations
        results[method] = {
            "seconds": seconds,
            "loss": float(loss),
            "grads": [
                [p.grad.cpu().numpy().tolist() for p in (lin.weight, lin.bias)]
                for lin in model.linears
            ],
            "forward_evals": forward,
            "backward_evals": total - forward,
        }
    return results


# ----------------------------------------------------------------------------------
# Damped linear systems: gradient of sum_k sum_i y_i(t_k) in A and y0


class Linear(torch.nn.Module):
    def __init__(self, a, device):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(np.asarray(a), dtype=DTYPE, device=device))
        self.evaluations = 0

    def forward(self, t, y):
        self.evaluations += 1
        return self.a @ y


def damped_case(case: dict, spec: dict, device) -> dict:
    ts = torch.tensor([0.0, *spec["ts"]], dtype=DTYPE, device=device)
    tol = dict(rtol=spec["rtol"], atol=spec["atol"], method="dopri5")
    tol["options"] = dict(max_num_steps=spec["max_steps"])
    results = {}
    for method, odeint in (
        ("odeint", torchdiffeq.odeint),
        ("odeint_adjoint", torchdiffeq.odeint_adjoint),
    ):
        field = Linear(case["a"], device)
        y0 = torch.tensor(np.asarray(case["y0"]), dtype=DTYPE, device=device)
        y0.requires_grad_(True)
        with torch.no_grad():
            odeint(field, y0, ts, **tol)
        forward = field.evaluations
        field.evaluations = 0
        try:
            loss = torch.sum(odeint(field, y0, ts, **tol)[1:])
            loss.backward()
        except (AssertionError, RuntimeError) as error:  # max_num_steps, dt underflow
            results[method] = {"forward_evals": forward, "error": _first_line(error)}
            continue
        results[method] = {
            "forward_evals": forward,
            "backward_evals": field.evaluations - forward,
            "grad_a": field.a.grad.cpu().numpy().tolist(),
            "grad_y0": y0.grad.cpu().numpy().tolist(),
        }
    return results


def damped(spec: dict, device) -> dict:
    return {name: damped_case(case, spec, device) for name, case in spec["cases"].items()}


# ----------------------------------------------------------------------------------


def main(argv) -> int:
    with open(argv[1]) as file:
        spec = json.load(file)
    out = {
        "versions": {"torch": torch.__version__, "torchdiffeq": torchdiffeq.__version__},
    }
    if spec.get("device", "cpu") == "cuda" and not torch.cuda.is_available():
        out["skipped"] = "torch.cuda is not available in the torch environment"
        print(json.dumps(out))
        return 0
    device = torch.device(spec.get("device", "cpu"))
    threads = _usable_cpus()
    torch.set_num_threads(threads)
    out["threads"] = threads
    out["omp_wait_policy"] = os.environ["OMP_WAIT_POLICY"]
    out["device"] = str(device)
    if "neural_ode" in spec:
        out["neural_ode"] = neural_ode(spec["neural_ode"], device)
    if "damped" in spec:
        out["damped"] = damped(spec["damped"], device)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
