# alloc_heavy.py - a deterministic, allocation-heavy Python workload for the preload test:
# dicts, lists, strings, JSON round trips, big buffers and several threads, printing digests
# that must not change whichever allocator runs underneath.
import hashlib
import json
import sys
import threading
import zlib
from collections import Counter, OrderedDict, deque


def lcg(seed):
    x = seed
    while True:
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        yield x >> 33


def build(seed, n):
    r = lcg(seed)
    d = {}
    for i in range(n):
        k = "key-%d-%x" % (i, next(r) % 100000)
        kind = next(r) % 5
        if kind == 0:
            d[k] = [next(r) % 1000 for _ in range(next(r) % 40)]
        elif kind == 1:
            d[k] = {"s": "x" * (next(r) % 300), "n": next(r) % 7919, "f": (next(r) % 1000) / 8}
        elif kind == 2:
            d[k] = "".join(chr(97 + next(r) % 26) for _ in range(next(r) % 120))
        elif kind == 3:
            d[k] = [[j, str(j), {"j": j}] for j in range(next(r) % 12)]
        else:
            d[k] = None
        if i % 7 == 3 and d:
            d.pop(next(iter(d)))
    return d


def digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def work(seed, results, slot):
    d = build(seed, 8000)
    for _ in range(2):  # JSON round trips
        text = json.dumps(d, sort_keys=True)
        d = json.loads(text)
    words = Counter()
    for v in d.values():
        if isinstance(v, str):
            words.update(v[i:i + 3] for i in range(0, len(v), 3))
    q = deque(maxlen=5000)
    for k in sorted(d):
        q.append(k * 2)
    blob = zlib.compress(text.encode(), 6)
    back = zlib.decompress(blob).decode()
    assert back == text
    od = OrderedDict(sorted(d.items())[:2000])
    results[slot] = (digest(d), len(text), len(blob) > 0, words.most_common(3), len(q),
                     digest(list(od)))


def main():
    results = [None] * 4
    threads = [threading.Thread(target=work, args=(s * 101 + 7, results, s)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, res in enumerate(results):
        print(i, res)
    # Large and huge buffers.
    big = bytearray(48 * 1024 * 1024)
    for i in range(0, len(big), 4093):
        big[i] = i % 251
    print("big", hashlib.sha256(big).hexdigest()[:16])
    s = "abc" * 5_000_000
    parts = s.split("b")
    print("split", len(parts), len("|".join(parts)))
    lst = [str(i) * (i % 50) for i in range(60000)]
    lst.sort(key=lambda x: (len(x), x))
    print("sorted", digest(lst[:1000]), digest(lst[-1000:]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
