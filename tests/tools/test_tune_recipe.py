"""qconvert.tools.tune's pieces that need no model: the recipe's TOML, exact patterns, the mode choice."""

from __future__ import annotations

import re
import tomllib

from qconvert.recipe import recipe_text
from qconvert.tools import tune


def test_recipe_text_is_toml_with_the_manifest_keys() -> None:
    names = ['model/dense_1/BiasAdd', 'a.b+c(d)[e]*', 'quote"back\\slash', 'tab\tname', 'ünï/名前']
    values = {"version": 1, "keep_float": [tune.pattern(n) for n in names[:3]],
              "int16": [tune.pattern(n) for n in names[3:]]}
    text = recipe_text(values, ["a comment"])
    back = tomllib.loads(text)
    assert back == values
    for n, p in zip(names, back["keep_float"] + back["int16"]):
        assert re.search(p, n) and not re.search(p, n + "x") and not re.search(p, "x" + n)


def test_int16_when_it_suffices_else_float() -> None:
    m = lambda snr: tune.Measure(snr, 0.0)  # noqa: E731
    b = tune.Budget(min_snr=30.0)
    assert tune._pick({"int16": m(29.5), "float": m(30.2)}, b) == "int16"  # within 1 dB of float
    assert tune._pick({"int16": m(31.0), "float": m(45.0)}, b) == "int16"  # meets the budget
    assert tune._pick({"int16": m(10.0), "float": m(29.0)}, b) == "float"  # 16x8 keeps the wide weight
    assert tune._pick({"float": m(29.0)}, b) == "float"  # no 16x8 form
    assert tune._pick({}, b) is None


def test_max_drop_bounds_by_disagreement_without_labels() -> None:
    b = tune.Budget(max_drop=2.0)
    assert b.met(tune.Measure(10.0, 1.0)) and not b.met(tune.Measure(10.0, 3.0))
    labelled = tune.Measure(10.0, 3.0, accuracy=97.5, float_accuracy=99.0)  # drop 1.5 with labels
    assert b.met(labelled, labelled=True) and not b.met(labelled)
