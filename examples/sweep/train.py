"""One replica of a learning-rate sweep: fits y = 3x - 2 + noise by minibatch SGD.

Its hyper-parameters come from the job's `sweep` table, one combination per replica, as
$PLEXUS_PARAM_LR and $PLEXUS_PARAM_BATCH; everything else is seeded, so a rerun gives the same
numbers. Writes its result to $PLEXUS_OUT/result.json for the `report` task. Standard library
only: it runs on any worker's python3, shipped there with the job (`working_dir = "."`).
"""
import json
import os
import random

from model import Line, mse

lr = float(os.environ.get("PLEXUS_PARAM_LR", "0.1"))
batch = int(os.environ.get("PLEXUS_PARAM_BATCH", "32"))
rng = random.Random(0)
data = [(x, 3 * x - 2 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(2048))]
train, held_out = data[:1536], data[1536:]

line = Line()
for epoch in range(5):
    rng.shuffle(train)
    for i in range(0, len(train), batch):
        line.step(train[i : i + batch], lr)
    print(f"epoch {epoch}: train loss {mse(line, train):.6f}", flush=True)

result = {"lr": lr, "batch": batch, "w": line.w, "b": line.b, "held_out_loss": mse(line, held_out)}
print(json.dumps(result), flush=True)
with open(os.path.join(os.environ.get("PLEXUS_OUT", "."), "result.json"), "w") as f:
    json.dump(result, f)
