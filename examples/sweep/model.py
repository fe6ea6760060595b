"""The model the sweep trains: a line, w * x + b, and its mean squared error."""


class Line:
    def __init__(self) -> None:
        self.w, self.b = 0.0, 0.0

    def __call__(self, x: float) -> float:
        return self.w * x + self.b

    def step(self, batch, lr: float) -> None:
        """One SGD step on the batch's mean squared error."""
        n = len(batch)
        gw = sum(2 * (self(x) - y) * x for x, y in batch) / n
        gb = sum(2 * (self(x) - y) for x, y in batch) / n
        self.w -= lr * gw
        self.b -= lr * gb


def mse(line: Line, data) -> float:
    return sum((line(x) - y) ** 2 for x, y in data) / len(data)
