# objects.py - Python objects under churn, for bench/real.py (run with PYTHONMALLOC=malloc, so
# every object, not only those over 512 bytes, comes from malloc): dicts of strings and
# lists built, serialized to JSON and back, sorted and dropped.
import json
import random

random.seed(1)
keep = []
total = 0
for rnd in range(5):
    rows = [{"id": i, "name": "n%d" % random.randrange(10**6), "tags": [str(j) for j in range(i % 7)]}
            for i in range(40000)]
    text = json.dumps(rows)
    back = json.loads(text)
    back.sort(key=lambda r: r["name"])
    keep.append(back[: len(back) // 10])
    if len(keep) > 4:
        keep.pop(0)
    total += len(text)
print(total, sum(len(k) for k in keep))
