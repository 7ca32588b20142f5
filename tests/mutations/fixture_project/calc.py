def add(a, b):
    return a + b


def total(xs):
    out = 0
    for x in xs:
        out = add(out, x)
    return out


def scale(x, k):
    return x * k
