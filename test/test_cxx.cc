// test_cxx.cc - proves rill's C++ operator new/delete replacements work in every form
// (plain, array, nothrow, sized, aligned), report failure the standard way (bad_alloc,
// nullptr, new_handler), and hold up under std::thread, containers and thread_local.
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <pthread.h>
#include <numeric>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <malloc.h>

#include "rill.h"

static std::atomic<long> failures{0};

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      if (failures.fetch_add(1) < 60) {                                                            \
        std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                  \
        std::fprintf(stderr, __VA_ARGS__);                                                         \
        std::fputc('\n', stderr);                                                                  \
      }                                                                                            \
    }                                                                                              \
  } while (0)

// Keeps a pointer observable so the compiler cannot elide an allocation.
static void *volatile sink;
static void *keep(void *p) {
  sink = p;
  return p;
}

// Hides a size from the optimiser (and from its object-size warnings).
static std::size_t opaque(std::size_t n) {
  volatile std::size_t v = n;
  return v;
}

static bool aligned(const void *p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

static void fill(void *p, std::size_t n, unsigned char v) {
  std::memset(p, v, n);
}
static bool filled(const void *p, std::size_t n, unsigned char v) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  for (std::size_t i = 0; i < n; i++)
    if (b[i] != v) return false;
  return true;
}

static const std::size_t absurd_sizes[] = {SIZE_MAX, SIZE_MAX - 4096, SIZE_MAX / 2 + 1,
                                           static_cast<std::size_t>(1) << 47};

struct alignas(256) Over {
  unsigned char bytes[300];
  Over() { std::memset(bytes, 0x5A, sizeof bytes); }
};

struct alignas(8192) Page2 {
  int v = 7;
};

struct Tracked {
  static std::atomic<int> live;
  std::uint64_t tag;
  explicit Tracked(std::uint64_t t = 0) : tag(t) { live++; }
  ~Tracked() { live--; }
};
std::atomic<int> Tracked::live{0};

static void t_plain_forms() {
  // new / delete expressions; -fsized-deallocation makes delete call the sized forms.
  for (int i = 0; i < 1000; i++) {
    auto *p = new std::uint64_t(static_cast<std::uint64_t>(i));
    CHECK(*p == static_cast<std::uint64_t>(i), "new uint64_t lost its value");
    delete p;
    auto *a = new char[static_cast<std::size_t>(i) + 1];
    fill(a, static_cast<std::size_t>(i) + 1, 0x33);
    CHECK(filled(a, static_cast<std::size_t>(i) + 1, 0x33), "new char[%d] contents", i + 1);
    delete[] a;
    auto *t = new Tracked[static_cast<std::size_t>(i % 17) + 1];
    delete[] t;
  }
  CHECK(Tracked::live == 0, "Tracked objects leaked: %d", Tracked::live.load());
  // Direct operator calls, every form.
  for (std::size_t n : {1ul, 16ul, 100ul, 4096ul, 300000ul, 40ul << 20}) {
    void *p = keep(::operator new(n));
    CHECK(p && aligned(p, n >= 16 ? 16 : 8), "operator new(%zu) = %p", n, p);
    fill(p, n, 1);
    ::operator delete(p);
    p = keep(::operator new[](n));
    fill(p, n, 2);
    ::operator delete[](p);
    p = keep(::operator new(n, std::nothrow));
    CHECK(p != nullptr, "operator new(%zu, nothrow) failed", n);
    if (p) fill(p, n, 3);
    ::operator delete(p, std::nothrow);
    p = keep(::operator new[](n, std::nothrow));
    CHECK(p != nullptr, "operator new[](%zu, nothrow) failed", n);
    if (p) fill(p, n, 4);
    ::operator delete[](p, std::nothrow);
    p = keep(::operator new(n));
    ::operator delete(p, n);
    p = keep(::operator new[](n));
    ::operator delete[](p, n);
  }
  void *z = keep(::operator new(0));
  CHECK(z != nullptr, "operator new(0) returned nullptr");
  ::operator delete(z);
}

static void t_aligned_forms() {
  for (int i = 0; i < 200; i++) {
    Over *o = new Over;
    CHECK(aligned(o, 256), "new Over (alignas 256) = %p", static_cast<void *>(o));
    CHECK(filled(o->bytes, sizeof o->bytes, 0x5A), "Over contents");
    delete o;
    Over *arr = new Over[static_cast<std::size_t>(i % 9) + 1];
    for (int k = 0; k <= i % 9; k++)
      CHECK(aligned(&arr[k], 256), "new Over[%d] element %d = %p", i % 9 + 1, k,
            static_cast<void *>(&arr[k]));
    delete[] arr;
    Page2 *pg = new Page2;
    CHECK(aligned(pg, 8192) && pg->v == 7, "new Page2 (alignas 8192) = %p",
          static_cast<void *>(pg));
    delete pg;
    auto up = std::make_unique<Over[]>(3);
    CHECK(aligned(up.get(), 256), "make_unique<Over[]> = %p", static_cast<void *>(up.get()));
  }
  for (std::size_t a = 16; a <= (std::size_t(1) << 22); a *= 2) {
    for (std::size_t n : {std::size_t(1), a - 1, a, a + 1, std::size_t(5000)}) {
      auto al = static_cast<std::align_val_t>(a);
      void *p = keep(::operator new(n, al));
      CHECK(aligned(p, a), "operator new(%zu, align %zu) = %p", n, a, p);
      fill(p, n, 5);
      ::operator delete(p, al);
      p = keep(::operator new[](n, al));
      CHECK(aligned(p, a), "operator new[](%zu, align %zu) = %p", n, a, p);
      fill(p, n, 6);
      ::operator delete[](p, al);
      p = keep(::operator new(n, al, std::nothrow));
      CHECK(p && aligned(p, a), "operator new(%zu, align %zu, nothrow) = %p", n, a, p);
      if (p) fill(p, n, 7);
      ::operator delete(p, al, std::nothrow);
      p = keep(::operator new[](n, al, std::nothrow));
      CHECK(p && aligned(p, a), "operator new[](%zu, align %zu, nothrow) = %p", n, a, p);
      ::operator delete[](p, al, std::nothrow);
      p = keep(::operator new(n, al));
      ::operator delete(p, n, al);
      p = keep(::operator new[](n, al));
      ::operator delete[](p, n, al);
    }
  }
}

static void t_failure_forms() {
  for (std::size_t n0 : absurd_sizes) {
    std::size_t n = opaque(n0);
    CHECK(keep(::operator new(n, std::nothrow)) == nullptr,
          "operator new(%#zx, nothrow) did not return nullptr", n);
    CHECK(keep(::operator new[](n, std::nothrow)) == nullptr,
          "operator new[](%#zx, nothrow) did not return nullptr", n);
    CHECK(keep(::operator new(n, std::align_val_t(64), std::nothrow)) == nullptr,
          "operator new(%#zx, align 64, nothrow) did not return nullptr", n);
    CHECK(keep(::operator new[](n, std::align_val_t(4096), std::nothrow)) == nullptr,
          "operator new[](%#zx, align 4096, nothrow) did not return nullptr", n);
    bool threw = false;
    try {
      keep(::operator new(n));
    } catch (const std::bad_alloc &) {
      threw = true;
    }
    CHECK(threw, "operator new(%#zx) did not throw std::bad_alloc", n);
    threw = false;
    try {
      keep(::operator new[](n));
    } catch (const std::bad_alloc &) {
      threw = true;
    }
    CHECK(threw, "operator new[](%#zx) did not throw std::bad_alloc", n);
    threw = false;
    try {
      keep(::operator new(n, std::align_val_t(256)));
    } catch (const std::bad_alloc &) {
      threw = true;
    }
    CHECK(threw, "operator new(%#zx, align 256) did not throw std::bad_alloc", n);
  }
  // A runtime array length that overflows is rejected too.
  volatile std::size_t huge_count = SIZE_MAX / 4;
  bool threw = false;
  try {
    auto *p = new std::uint64_t[huge_count];
    keep(p);
    delete[] p;
  } catch (const std::bad_alloc &) { // bad_array_new_length derives from bad_alloc
    threw = true;
  }
  CHECK(threw, "new uint64_t[SIZE_MAX/4] did not throw");
  auto *q = new (std::nothrow) char[static_cast<std::size_t>(huge_count) * 2];
  CHECK(keep(q) == nullptr, "new (nothrow) char[SIZE_MAX/2] = %p, want nullptr",
        static_cast<void *>(q));
}

// operator new calls the installed new_handler on failure before throwing.
static int handler_calls;
static void counting_handler() {
  if (++handler_calls >= 3) std::set_new_handler(nullptr);
}

static void t_new_handler() {
  handler_calls = 0;
  std::set_new_handler(counting_handler);
  bool threw = false;
  try {
    keep(::operator new(opaque(SIZE_MAX - 100)));
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  std::set_new_handler(nullptr);
  CHECK(threw, "operator new(SIZE_MAX-100) with a new_handler did not throw");
  CHECK(handler_calls == 3, "new_handler called %d times, want 3", handler_calls);
  handler_calls = 0;
  std::set_new_handler(counting_handler);
  void *p = keep(::operator new(opaque(SIZE_MAX - 100), std::nothrow));
  std::set_new_handler(nullptr);
  CHECK(p == nullptr && handler_calls == 3,
        "nothrow new with a new_handler: %p after %d handler calls, want nullptr after 3", p,
        handler_calls);
}

// Containers and threads: every thread builds and checks its own structures, then
// passes objects to other threads, which check and free them.
static void t_threads_containers() {
  const int nthreads = 8;
  std::mutex mu;
  std::vector<std::shared_ptr<std::vector<std::string>>> shared_out;
  std::vector<std::thread> ths;
  std::atomic<int> bad{0};
  for (int t = 0; t < nthreads; t++) {
    ths.emplace_back([t, &mu, &shared_out, &bad] {
      std::map<int, std::string> m;
      std::unordered_map<std::string, std::vector<int>> um;
      std::list<std::unique_ptr<Over>> overs;
      std::deque<std::string> dq;
      for (int i = 0; i < 20000; i++) {
        std::string s = "thread" + std::to_string(t) + "-item" + std::to_string(i);
        m[i] = s;
        um[s].assign(static_cast<std::size_t>(i % 50), i);
        dq.push_back(s + s);
        if (i % 100 == 0) overs.push_back(std::make_unique<Over>());
        if (dq.size() > 1000) dq.pop_front();
        if (i % 3 == 0) m.erase(i - 1);
      }
      for (auto &kv : m)
        if (kv.second != "thread" + std::to_string(t) + "-item" + std::to_string(kv.first)) bad++;
      for (auto &kv : um) {
        int i = std::atoi(kv.first.c_str() + kv.first.find("item") + 4);
        if (kv.second.size() != static_cast<std::size_t>(i % 50)) bad++;
      }
      for (auto &o : overs)
        if (!aligned(o.get(), 256) || !filled(o->bytes, sizeof o->bytes, 0x5A)) bad++;
      auto out = std::make_shared<std::vector<std::string>>();
      for (int i = 0; i < 5000; i++)
        out->push_back(std::string(static_cast<std::size_t>(i % 200), 'a' + t));
      std::lock_guard<std::mutex> g(mu);
      shared_out.push_back(out);
    });
  }
  for (auto &th : ths) th.join();
  CHECK(bad == 0, "%d container entries were wrong after multithreaded building", bad.load());
  // Free the vectors built by the (exited) threads from other threads.
  std::vector<std::thread> freers;
  for (int t = 0; t < nthreads; t++) {
    freers.emplace_back([t, &shared_out, &bad] {
      auto v = std::move(shared_out[static_cast<std::size_t>(t)]);
      for (std::size_t i = 0; i < v->size(); i++)
        if ((*v)[i].size() != i % 200) bad++;
      v.reset();
    });
  }
  for (auto &th : freers) th.join();
  CHECK(bad == 0, "%d strings were wrong when checked by another thread", bad.load());
}

// thread_local objects whose destructors allocate and free, running during thread exit.
static std::atomic<int> tl_dtors{0};
struct TlsHeavy {
  std::vector<std::string> v;
  TlsHeavy() {
    for (int i = 0; i < 100; i++) v.push_back(std::string(static_cast<std::size_t>(i * 10), 'x'));
  }
  ~TlsHeavy() {
    bool ok = true;
    for (std::size_t i = 0; i < v.size(); i++) ok = ok && v[i].size() == i * 10;
    std::map<int, std::string> m; // allocate and free during thread teardown
    for (int i = 0; i < 200; i++) m[i] = std::string(100, 'y');
    auto *o = new Over;
    ok = ok && aligned(o, 256);
    delete o;
    if (ok) tl_dtors++;
  }
};
thread_local TlsHeavy tls_heavy;

// A thread_local constructed before the thread's first allocation, so its destructor is
// registered before anything rill may register for the thread, and runs after it.
static std::atomic<int> early_dtors{0};
static std::mutex left_mu;
static std::vector<std::string *> *left_behind; // freed by the main thread
struct EarlyTls {
  int touched = 0;
  ~EarlyTls() {
    std::vector<std::unique_ptr<std::string>> v;
    for (int i = 0; i < 50; i++) v.push_back(std::make_unique<std::string>(300, 'e'));
    auto *keep_me = new std::string(1000, 'k');
    std::lock_guard<std::mutex> g(left_mu);
    left_behind->push_back(keep_me);
    early_dtors++;
  }
};
thread_local EarlyTls early_tls;

// A pthread key whose destructor uses new/delete and re-sets itself, so it also runs in
// the destructor rounds after rill's own thread clean-up.
static pthread_key_t cxx_key;
static std::atomic<int> key_calls{0};
static void cxx_key_dtor(void *v) {
  key_calls++;
  auto *s = static_cast<std::string *>(v);
  bool ok = s->size() == 777;
  delete s;
  auto *o = new Over;
  ok = ok && aligned(o, 256);
  delete o;
  std::map<int, int> m;
  for (int i = 0; i < 100; i++) m[i] = i;
  CHECK(ok && m.size() == 100, "pthread key destructor saw a corrupted value");
  static thread_local int rounds = 0; // plain int: no destructor to register
  if (++rounds < PTHREAD_DESTRUCTOR_ITERATIONS)
    pthread_setspecific(cxx_key, new std::string(777, 'r'));
}

static void t_thread_local() {
  tl_dtors = 0;
  early_dtors = 0;
  key_calls = 0;
  left_behind = new std::vector<std::string *>;
  if (pthread_key_create(&cxx_key, cxx_key_dtor)) {
    CHECK(false, "pthread_key_create failed");
    return;
  }
  const int n = 64;
  for (int round = 0; round < 4; round++) {
    std::vector<std::thread> ths;
    for (int i = 0; i < n / 4; i++)
      ths.emplace_back([] {
        early_tls.touched = 1; // before this thread allocates anything
        CHECK(tls_heavy.v.size() == 100, "thread_local not built");
        pthread_setspecific(cxx_key, new std::string(777, 'r'));
      });
    for (auto &t : ths) t.join();
  }
  CHECK(tl_dtors == n, "%d of %d thread_local destructors ran cleanly", tl_dtors.load(), n);
  CHECK(early_dtors == n, "%d of %d early thread_local destructors ran", early_dtors.load(), n);
  CHECK(key_calls == n * PTHREAD_DESTRUCTOR_ITERATIONS,
        "pthread key destructor ran %d times, want %d", key_calls.load(),
        n * PTHREAD_DESTRUCTOR_ITERATIONS);
  CHECK(left_behind->size() == static_cast<std::size_t>(n), "%zu objects left by destructors",
        left_behind->size());
  for (auto *p : *left_behind) {
    CHECK(p->size() == 1000, "object left by an exited thread's destructor is corrupted");
    delete p;
  }
  delete left_behind;
  pthread_key_delete(cxx_key);
}

// Statistics prove rill, not libstdc++'s default operator new, served the memory.
static void t_served_by_rill() {
  struct rill_stats before {
  }, peak{};
  rill_stats_get(&before);
  std::vector<char *> v;
  for (int i = 0; i < 32768; i++) v.push_back(new char[1024]);
  rill_stats_get(&peak);
  CHECK(peak.bytes_in_use >= before.bytes_in_use + 16u * 1024 * 1024,
        "bytes_in_use %" PRIu64 " -> %" PRIu64 " after 32 MiB of new char[1024]: operator new "
        "is not rill's",
        before.bytes_in_use, peak.bytes_in_use);
  for (char *p : v) delete[] p;
}

// A static object destroyed at exit frees memory and allocates more.
struct AtExit {
  std::vector<std::string> *v = nullptr;
  ~AtExit() {
    if (!v) return;
    std::string s(1000, 'z');
    v->push_back(s);
    delete v;
  }
} at_exit_holder;

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  at_exit_holder.v = new std::vector<std::string>(100, std::string(50, 'q'));
  struct {
    const char *name;
    void (*fn)();
  } tests[] = {
      {"plain/array/nothrow/sized", t_plain_forms},
      {"aligned new", t_aligned_forms},
      {"failure (bad_alloc, nullptr)", t_failure_forms},
      {"new_handler", t_new_handler},
      {"threads and containers", t_threads_containers},
      {"thread_local destructors", t_thread_local},
      {"served by rill", t_served_by_rill},
  };
  for (auto &t : tests) {
    long before = failures.load();
    t.fn();
    std::printf("%-30s %s\n", t.name, failures.load() == before ? "ok" : "FAILED");
  }
  if (failures) {
    std::fprintf(stderr, "test_cxx: %ld check(s) FAILED\n", failures.load());
    return 1;
  }
  std::printf("test_cxx: all checks passed\n");
  return 0;
}
