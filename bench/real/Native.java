// Native.java - a JVM workload for bench/real.py whose memory traffic is native: each
// of a pool's threads compresses and expands buffers through zlib (Deflater and
// Inflater keep their streams in memory the JVM takes with malloc) and takes direct
// ByteBuffers (malloc too, given back when the collector frees them). The Java heap
// stays small; what the allocators differ in is the native part of the JVM's RSS,
// which glibc's per-thread arenas are known to inflate.
// usage: java -Xmx256m Native.java [threads] [rounds]
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.zip.Deflater;
import java.util.zip.Inflater;

public class Native {
  static long work(int seed, int rounds) throws Exception {
    Random r = new Random(seed);
    byte[] in = new byte[64 * 1024];
    r.nextBytes(in);
    for (int i = 0; i < in.length; i += 2) in[i] = 7; // half compressible
    byte[] out = new byte[in.length + 1024], back = new byte[in.length];
    long sum = 0;
    for (int k = 0; k < rounds; k++) {
      Deflater d = new Deflater(1 + r.nextInt(9));
      d.setInput(in, 0, 1024 + r.nextInt(in.length - 1024));
      d.finish();
      int n = d.deflate(out);
      d.end();
      Inflater inf = new Inflater();
      inf.setInput(out, 0, n);
      sum += inf.inflate(back);
      inf.end();
      ByteBuffer bb = ByteBuffer.allocateDirect(4096 + r.nextInt(65536));
      bb.put(0, (byte) 1);
      sum += bb.capacity();
    }
    return sum;
  }

  public static void main(String[] args) throws Exception {
    int threads = args.length > 0 ? Integer.parseInt(args[0]) : 8;
    int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 1500;
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    List<Future<Long>> results = new ArrayList<>();
    long t0 = System.nanoTime();
    for (int t = 0; t < threads; t++) {
      final int seed = t;
      results.add(pool.submit(() -> work(seed, rounds)));
    }
    long total = 0;
    for (Future<Long> f : results) total += f.get();
    pool.shutdown();
    System.out.printf("checksum %d%n", total); // the same under every allocator
    System.err.printf("%.2f s%n", (System.nanoTime() - t0) / 1e9);
  }
}
