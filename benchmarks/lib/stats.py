"""The seed statistics every study report uses: the 95% threshold of a two-sample t-test (Student's t quantile
computed exactly, no scipy at run time) and the number format of the tables."""

from __future__ import annotations

import functools
import math
import statistics


# Two-sided 97.5% quantiles of Student's t by degrees of freedom (for the seed comparison's 95% threshold).
def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function: the continued fraction of Numerical Recipes (3rd ed.,
    6.4) evaluated by the modified Lentz method, on the side of x where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b
    return front * _beta_fraction(a, b, x) / a


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300

    def guard(value: float) -> float:
        return value if abs(value) > tiny else tiny

    c, d = 1.0, 1.0 / guard(1.0 - (a + b) * x / (a + 1))
    result = d
    for m in range(1, 1000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even step, then the odd one
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 / guard(1.0 + numerator * d)
            c = guard(1.0 + numerator / c)
            result *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return result


def student_t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom: 1 − I_{dof/(dof + t²)}(dof/2, 1/2) / 2 for t >= 0."""
    tail = 0.5 * regularized_beta(dof / 2, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.cache
def t_975(dof: int) -> float:
    """The 97.5% quantile of Student's t with `dof` degrees of freedom, exact to about 1e-12: bisection on
    student_t_cdf (tests/benchmarks/studies/test_field_study.py checks it against scipy, which is only a test dependency)."""
    low, high = 0.0, 1.0
    while student_t_cdf(high, dof) < 0.975:
        low, high = high, 2 * high
    while high - low > 1e-13 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_cdf(middle, dof) < 0.975 else (low, middle)
    return (low + high) / 2


def t_threshold(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """t × s.e., the 95% threshold of a two-sample t-test with pooled variance, for a difference of two means of n_a
    and n_b seeds (s.e. = s_pooled · sqrt(1/n_a + 1/n_b), n_a + n_b − 2 degrees of freedom); nan below two seeds a side."""
    if n_a < 2 or n_b < 2:
        return float("nan")
    dof = n_a + n_b - 2
    pooled = math.sqrt(((n_a - 1) * sd_a ** 2 + (n_b - 1) * sd_b ** 2) / dof)
    return t_975(dof) * pooled * math.sqrt(1 / n_a + 1 / n_b)


def fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def difference_cells(a: list[float], b: list[float]) -> list[str]:
    """The cells [mean(a) − mean(b), t × s.e., beyond the seed noise?] of a report's difference table, each side a
    list of per-seed values; the threshold and verdict are "–" below two seeds a side."""
    threshold = t_threshold(statistics.stdev(a) if len(a) > 1 else math.nan, len(a),
                            statistics.stdev(b) if len(b) > 1 else math.nan, len(b))
    difference = statistics.mean(a) - statistics.mean(b)
    verdict = "–" if not math.isfinite(threshold) else ("yes" if abs(difference) > threshold else "no")
    return [f"{difference:+.2f}", fmt(threshold), verdict]


def two_sample_p(a: list[float], b: list[float]) -> float:
    """The two-sided p-value of the pooled two-sample t-test of mean(a) = mean(b) (the test whose 95% threshold
    `t_threshold` gives); nan below two values a side or when both sides have no spread."""
    n_a, n_b = len(a), len(b)
    if n_a < 2 or n_b < 2:
        return float("nan")
    dof = n_a + n_b - 2
    pooled = math.sqrt(((n_a - 1) * statistics.variance(a) + (n_b - 1) * statistics.variance(b)) / dof)
    if pooled == 0:
        return float("nan")
    t = (statistics.mean(a) - statistics.mean(b)) / (pooled * math.sqrt(1 / n_a + 1 / n_b))
    return 2 * student_t_cdf(-abs(t), dof)


def paired_p(a: list[float], b: list[float]) -> float:
    """The two-sided p-value of the paired t-test of mean(a − b) = 0, a[i] and b[i] one pair (one seed's two arms
    sharing their first epochs); nan below two pairs or when the differences have no spread."""
    if len(a) != len(b):
        raise ValueError(f"a paired test needs as many values a side, got {len(a)} and {len(b)}")
    differences = [x - y for x, y in zip(a, b)]
    if len(differences) < 2 or statistics.stdev(differences) == 0:
        return float("nan")
    t = statistics.mean(differences) / (statistics.stdev(differences) / math.sqrt(len(differences)))
    return 2 * student_t_cdf(-abs(t), len(differences) - 1)


def paired_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """The 95% interval of mean(a − b) from the paired t-test; (nan, nan) below two pairs."""
    differences = [x - y for x, y in zip(a, b, strict=True)]
    if len(differences) < 2:
        return float("nan"), float("nan")
    half = t_975(len(differences) - 1) * statistics.stdev(differences) / math.sqrt(len(differences))
    return statistics.mean(differences) - half, statistics.mean(differences) + half


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (each adjusted p < 0.05 is a rejection at a familywise
    error of 5 %): the k-th smallest is multiplied by (m − k + 1), then made monotone and capped at 1. A nan p (a test
    that could not be made) stays nan and does not count towards m."""
    made = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    adjusted = [float("nan")] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(made):
        running = max(running, min(1.0, (len(made) - rank) * p))
        adjusted[i] = running
    return adjusted
