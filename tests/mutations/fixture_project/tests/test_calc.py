from calc import add, scale, total


def test_add():
    assert add(2, 3) == 5, "add is wrong"


def test_total():
    assert total([1, 2, 3]) == 6


def test_scale():
    assert scale(2, 3) == 6, "scale is wrong"
