// node_work.js - work for test/real/node.sh: worker threads build and drop objects, buffers
// and strings, compress and hash them, and post results back to the main thread. V8's own
// heap holds the objects; Buffers, zlib and OpenSSL take their memory from malloc, on the
// workers' threads and on libuv's pool. Prints one digest per worker, the same under any
// allocator.
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
const zlib = require('zlib');
const crypto = require('crypto');

function work(seed, rounds) {
  const hash = crypto.createHash('sha256');
  let live = [];
  for (let i = 0; i < rounds; i++) {
    const n = (i * 7919 + seed * 104729) % 9973;
    live.push({ id: i, name: 'item-' + n, list: new Array(n % 40).fill(n),
                buf: Buffer.alloc((n % 97) * 64, n & 255) });
    if (live.length > 2000) live = live.slice(500); // older objects die in a batch
    if (i % 400 === 0) {
      const text = Buffer.from(JSON.stringify(live.slice(-150)));
      const packed = zlib.deflateSync(text);
      hash.update(zlib.inflateSync(packed)); // round trip: the bytes must survive
      hash.update(String(text.length));
    }
  }
  return hash.digest('hex');
}

if (isMainThread) {
  const threads = Number(process.argv[2] || 4), rounds = Number(process.argv[3] || 20000);
  const out = new Array(threads);
  let done = 0;
  for (let t = 0; t < threads; t++) {
    const w = new Worker(__filename, { workerData: { seed: t + 1, rounds } });
    w.on('message', (m) => {
      out[t] = m;
      if (++done === threads) console.log(out.join('\n'));
    });
    w.on('error', (e) => { console.error(e); process.exitCode = 1; });
  }
  // the main thread's own share, through libuv's pool (async zlib)
  zlib.gzip(Buffer.alloc(1 << 20, 7), (err, z) => {
    if (err) throw err;
    console.error('main: gzip of 1 MiB to ' + z.length + ' bytes');
  });
} else {
  parentPort.postMessage(work(workerData.seed, workerData.rounds));
}
