"""Query parameters as the API reads them: a whole number in decimal digits, a time as
JSON writes a number, and each parameter once. The framework reads Python's spellings
(``1_0``, `` 10``, ``+10``, ``10.0`` for a whole number) as numbers and keeps the last of
a repeated parameter: a filter a proxy, a cache or a log reads one way would then be
read another way here."""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from pydantic import BeforeValidator

from queuelog.api.deps import Reader
from queuelog.errors import ValidationFailed


def _written(pattern: str, what: str) -> BeforeValidator:
    def check(value: object) -> object:
        if isinstance(value, str) and not re.fullmatch(pattern, value):
            raise ValueError(f"must be {what}")
        return value

    return BeforeValidator(check)


# Up to 19 digits: any 64-bit id; the field's own bounds say the rest.
DIGITS = _written(r"[0-9]{1,19}", "written in decimal digits, at most 19 of them")
# A number as JSON (and so JavaScript, and most clients) writes one: any number of
# decimals, an exponent (a computed time may print as 1e-7).
SECONDS = _written(
    r"[0-9]{1,19}(\.[0-9]+)?([eE][+-]?[0-9]{1,4})?", "a number as JSON writes one, not signed"
)


def _one_value_each(request: Request, _caller: Reader) -> None:
    """Refuse (422) a query parameter of the route given more than once; one the route
    does not read is ignored, once or twice. Checked with the fields, after the key, its
    rate limit and its role."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = {param.alias for param in route.dependant.query_params}
    # Counted in one pass: a head may hold thousands of one name.
    given = Counter(name for name, _ in request.query_params.multi_items() if name in known)
    twice = sorted(name for name, count in given.items() if count > 1)
    if twice:
        raise ValidationFailed(
            "Give each query parameter once",
            errors=[{"loc": ["query", name], "msg": "given more than once"} for name in twice],
        )


OneValueEach = Annotated[None, Depends(_one_value_each)]
