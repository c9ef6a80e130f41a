import numpy as np

from scoring.evaluate.stacked import central_differences, gradient, smooth


def test_central_differences_of_a_cubic():
    t = np.arange(20) * 0.1
    x = np.stack([t ** 3, 0 * t, 0 * t], axis=1)
    v, a, j = (y[0] for y in central_differences(x[None], np.array([0.1]), np.array([19])))
    np.testing.assert_allclose(v[1:-1], 3 * t[1:-1] ** 2 + 0.01, rtol=1e-9)  # (x+1 - x-1)/2h = 3t² + h²
    np.testing.assert_allclose(a[1:-1], 6 * t[1:-1], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(j[2:-2], 6.0, rtol=1e-9)
    assert v[0] == v[1] and j[0] == j[2] and j[-1] == j[-3]


def test_gradient_equals_numpy_row_by_row_whatever_the_padding():
    x = np.random.default_rng(0).random((3, 50, 2, 3))
    last = np.array([49, 20, 1])
    dt = np.array([0.05, 0.1, 0.02])
    g = gradient(x, dt, last)
    for e in range(3):
        assert np.array_equal(g[e, :last[e] + 1], np.gradient(x[e, :last[e] + 1], dt[e], axis=0))
    assert np.array_equal(gradient(x[:, :1], dt, np.zeros(3, int)), np.zeros((3, 1, 2, 3)))


def test_padded_rows_smooth_and_difference_like_each_episode_alone():
    rng = np.random.default_rng(1)
    x = rng.random((3, 30, 3))
    n_steps = np.array([30, 12, 5])
    x[1, 12:] = x[1, 11]  # padding repeats the last step
    x[2, 5:] = x[2, 4]
    dt = np.array([0.05, 0.1, 0.02])
    rows = smooth(x, n_steps, 5)
    diffs = central_differences(rows, dt, n_steps - 1)
    for e, n in enumerate(n_steps):
        alone = smooth(x[e:e + 1, :n], n_steps[e:e + 1], 5)
        assert np.array_equal(rows[e, :n], alone[0])
        for got, want in zip(diffs, central_differences(alone, dt[e:e + 1], n_steps[e:e + 1] - 1)):
            assert np.array_equal(got[e, :n], want[0])
