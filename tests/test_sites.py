"""Site classification, encoding and the flat layout."""

import numpy as np
import pyro.distributions as dist
import pytest
import torch

from pyro_gwg.sites import (
    BINARY,
    CATEGORICAL,
    ONE_HOT,
    ORDINAL,
    UnsupportedModelError,
    build_layout,
    classify_site,
)

CASES = [
    (dist.Bernoulli(0.3).expand([2, 3]), BINARY, (2, 3), 0),
    (dist.Bernoulli(0.3).expand([4]).to_event(1), BINARY, (4,), 0),
    (
        dist.Bernoulli(0.3).expand([4]).mask(torch.tensor([True, False, True, True])),
        BINARY,
        (4,),
        0,
    ),
    (dist.Categorical(logits=torch.zeros(5, 3)), CATEGORICAL, (5,), 3),
    (dist.OneHotCategorical(logits=torch.zeros(5, 4)), ONE_HOT, (5,), 4),
    (dist.Binomial(torch.tensor([3.0, 7.0]), 0.5), ORDINAL, (2,), 0),
    (dist.Poisson(2.0).expand([3]), ORDINAL, (3,), 0),
    (dist.Geometric(0.4), ORDINAL, (), 0),
]


@pytest.mark.parametrize("fn,kind,coord_shape,categories", CASES)
def test_classification_and_encoding(fn, kind, coord_shape, categories):
    value = fn.sample()
    site = classify_site("s", fn, value)
    assert site.kind == kind
    assert tuple(site.coord_shape) == coord_shape
    assert site.num_categories == categories
    codes = site.codes_from_values(value.unsqueeze(0))[0]
    assert codes.shape == coord_shape and codes.dtype == torch.long
    assert torch.equal(site.values_from_codes(codes), value.to(site.values_from_codes(codes).dtype))


def test_ordinal_bounds_follow_the_support():
    site = classify_site("k", dist.Binomial(torch.tensor([3.0, 7.0]), 0.5), torch.zeros(2))
    assert site.lower.tolist() == [0, 0] and site.upper.tolist() == [3, 7]
    site = classify_site("n", dist.Geometric(0.4), torch.tensor(1.0))
    assert float(site.upper) == float("inf")


def test_layout_offsets_and_types():
    sites = [
        classify_site(name, fn, fn.sample())
        for name, fn in [
            ("b", dist.Bernoulli(0.5).expand([3])),
            ("z", dist.OneHotCategorical(logits=torch.zeros(2, 4))),
            ("k", dist.Binomial(5, 0.5)),
        ]
    ]
    layout = build_layout(sites)
    assert [s.offset for s in sites] == [0, 3, 5]
    assert layout.num_coords == 6 and layout.width == 4
    assert layout.is_scalar.tolist() == [True, True, True, False, False, True]
    assert layout.num_values().tolist() == [2, 2, 2, 4, 4, 6]


def test_continuous_site_is_refused():
    with pytest.raises(UnsupportedModelError, match="'mu' is continuous"):
        classify_site("mu", dist.Normal(0.0, 1.0), torch.tensor(0.0))


BAD_VALUES = [
    # (distribution, value given, what the message must say)
    (dist.Bernoulli(0.3).expand([3]), [0.0, 2.0, 1.0], "2.0 at position \\(1,\\).*0 or 1"),
    (dist.Bernoulli(0.3).expand([3]), [0.0, 0.5, 1.0], "0.5 at position \\(1,\\).*whole number"),
    (dist.Geometric(0.3), -2.0, "-2.0 .*integer >= 0"),
    (dist.Poisson(2.0), float("nan"), "nan.*whole number"),
    (dist.Binomial(4, 0.5), 5, "5 .*integer in 0 .. 4"),
    (dist.Categorical(logits=torch.zeros(3)), 3, "3 .*category in 0 .. 2"),
    (dist.Categorical(logits=torch.zeros(3)), -1, "-1 .*category in 0 .. 2"),
    (dist.OneHotCategorical(logits=torch.zeros(3)), [1.0, 1.0, 0.0], "one-hot vector"),
    (dist.OneHotCategorical(logits=torch.zeros(3)), [0.0, 0.0, 0.0], "one-hot vector"),
    (dist.Bernoulli(0.3).expand([3]), [0.0, 1.0], "shape \\(1, 2\\); expected \\(C, 3\\)"),
    (dist.Bernoulli(0.3), "abc", "not a tensor of numbers"),
]


@pytest.mark.parametrize("fn,value,message", BAD_VALUES)
def test_values_outside_the_support_are_refused_naming_the_site(fn, value, message):
    site = classify_site("s", fn, fn.sample())
    value = value if isinstance(value, str) else torch.tensor(value).unsqueeze(0)
    with pytest.raises(ValueError, match="Initial value of latent site 's'.*" + message):
        site.codes_from_values(value, "Initial value")


def test_values_given_as_arrays_lists_and_bools_are_decoded():
    site = classify_site("s", dist.Bernoulli(0.3).expand([3]), torch.zeros(3))
    expected = torch.tensor([[0, 1, 1]])
    for value in (np.array([[0.0, 1.0, 1.0]]), [[0, 1, 1]], torch.tensor([[False, True, True]])):
        assert torch.equal(site.codes_from_values(value), expected)
