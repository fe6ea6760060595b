"""The sweep's report: every replica's result, best first (the lowest held-out loss)."""
import glob
import json
import os

results = [json.load(open(p)) for p in glob.glob(os.path.join(os.environ["PLEXUS_IN"], "train", "*", "result.json"))]
results.sort(key=lambda r: r["held_out_loss"])
print(f"{'lr':>6} {'batch':>6} {'w':>8} {'b':>8} {'held-out loss':>14}")
for r in results:
    print(f"{r['lr']:>6} {r['batch']:>6} {r['w']:>8.4f} {r['b']:>8.4f} {r['held_out_loss']:>14.6f}")
best = results[0]
print(f"best: lr={best['lr']} batch={best['batch']} (held-out loss {best['held_out_loss']:.6f}) of {len(results)} replicas")
