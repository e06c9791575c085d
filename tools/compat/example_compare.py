"""Whether an example's results under odeckpt match diffrax's, and why a run failed."""

import re

import numpy as np

from .example_specs import Example

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")


def printed_numbers(stdout: str, ignore: str) -> list[float]:
    return [float(x) for x in NUMBER.findall(re.sub(ignore, "", stdout))]


def compare(example: Example, ref: dict, ours: dict) -> tuple[bool, str]:
    """Whether odeckpt's results match diffrax's within the example's tolerance, and
    the largest relative difference seen (or what differs)."""
    a = printed_numbers(ref["stdout"], example.ignore)
    b = printed_numbers(ours["stdout"], example.ignore)
    if len(a) != len(b):
        return False, f"printed {len(b)} numbers, diffrax {len(a)}"
    pairs = [(np.asarray(a), np.asarray(b), "printed numbers")]
    n = len(example.results)
    if len(ref["results"]) != len(ours["results"]):
        return False, "results missing"
    for (name, x), (_, y) in zip(ref["results"][:n], ours["results"][:n], strict=True):
        if len(x) != len(y) or any(u.shape != v.shape for u, v in zip(x, y, strict=True)):
            return False, f"`{name}`: structure or shape differs"
        pairs += [(u, v, f"`{name}`") for u, v in zip(x, y, strict=True)]
    shown = [
        f"`{name}`: {_plain(x)} (diffrax {_plain(y)})"
        for (name, y), (_, x) in zip(ref["results"][n:], ours["results"][n:], strict=True)
    ]
    worst, where = 0.0, ""
    for x, y, name in pairs:
        if x.size == 0:
            continue
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        # The difference in units of the tolerance: allclose holds where it is <= 1.
        scaled = np.abs(x - y) / (example.atol + example.rtol * np.abs(x))
        largest = float(np.nanmax(scaled))
        if not np.allclose(y, x, rtol=example.rtol, atol=example.atol, equal_nan=True):
            text = f"{name} outside the tolerance ({largest:.3g} times it)"
            return False, "; ".join([text, *shown])
        if largest >= worst:
            worst, where = largest, name
    count = sum(x.size for x, _, _ in pairs)
    text = f"{count} values; largest difference {worst:.2g} of the tolerance ({where or '-'})"
    return True, "; ".join([text, *shown] + ([example.differs] if example.differs else []))


def _plain(values: list) -> str:
    return ", ".join(str(np.asarray(v).tolist()) for v in values)


# Known causes of a failure under odeckpt: (message pattern, category, reason).
RULES: tuple[tuple[str, str, str], ...] = ()


def classify(error: dict) -> tuple[str, str]:
    text = f"{error['type']}: {error['message']}"
    for pattern, category, reason in RULES:
        if re.search(pattern, text):
            return category, reason
    return "to investigate", short(text)


def short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
