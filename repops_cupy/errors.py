"""The operator library's one error type.

Raised for anything a caller gets wrong: wrong dtype, mismatched shapes, unknown op,
bad attributes, empty input where a value is undefined. Non-finite *values* are not
errors: they propagate per element as IEEE-754 says.
"""


class OpError(ValueError):
    """Invalid call of a reproducible operator (shape, dtype, attribute, op name)."""
