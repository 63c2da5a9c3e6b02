"""Known differences of the conformance harness, each with its reason, and the coverage floors.

``KNOWN_OPS[name]`` (or ``KNOWN_OPS["name@cuda"]`` for one device) maps a kind of failure
("value", "raises", "grad", "gradgrad", "error", "gradcheck") to why asyncgrad differs from
torch there; the full run (ASYNCGRAD_CONFORMANCE=full) fails when a listed difference is no
longer seen, so the list only shrinks."""

from __future__ import annotations

OPINFO_FLOOR = 588
MODULEINFO_FLOOR = 114

_CTC = (
    "asyncgrad's ctc_loss gradient is the exact derivative with respect to log_probs (minus the "
    "posterior); torch's assumes log_probs came from log_softmax (exp(log_probs) - posterior), "
    "and OpInfo's samples are not normalised: the two agree after a log_softmax"
)

KNOWN_OPS: dict[str, dict[str, str]] = {
    "nn.functional.ctc_loss": {"grad": _CTC},
    "as_strided.partial_views": {
        "value": "as_strided of a view counts storage_offset from the view's own first element; "
        "torch's from its base's storage",
        "raises": "as_strided of a view reaches only the view's own elements",
    },
    "as_strided_scatter": {
        "grad": "asyncgrad gives self the gradient outside the scattered region; torch 2.13 gives "
        "it the region's"
    },
    "linalg.eigh": {
        "value": "eigenvectors are unique up to sign; NumPy's LAPACK call picks other signs than "
        "torch's (NOTE [linalg results]); the eigenvalues and sign-invariant gradients agree"
    },
    "linalg.norm.subgradients_at_zero": {
        "gradgrad": "at the zero vector the 2-norm has no second derivative: torch's double "
        "backward gives NaN, asyncgrad's the derivative of its zero subgradient, 0"
    },
    "logcumsumexp@cuda": {
        "grad": "a float32 sample with an element of 1e4, where float32's spacing is 1e-3: the "
        "device's log-step scan is off by 3.2e-3 from float64's gradient, torch's CPU loop by "
        "3.2e-3 the other way"
    },
    "special.bessel_j0": {
        "value": "asyncgrad's (SciPy's) values are exact to rounding (checked against mpmath); "
        "torch's differ by up to 6e-6 relative near the function's zeros"
    },
    "special.bessel_y1": {
        "value": "asyncgrad's (SciPy's) values are exact to rounding (checked against mpmath); "
        "torch's differ by up to 7e-6 relative near the function's zeros"
    },
}
KNOWN_MODULES: dict[str, dict[str, str]] = {
    "CTCLoss": {"grad": _CTC},
    "KLDivLoss": {
        "grad": "at a negative target (not a probability; the loss is NaN) torch's input "
        "gradient is NaN, asyncgrad's the derivative -target"
    },
}
