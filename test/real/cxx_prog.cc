// cxx_prog.cc - an ordinary C++ program (threads, containers, strings, aligned new,
// shared_ptr handed between threads) with deterministic output, run with and without rill
// preloaded by cxx.sh, and compiled under rill by gcc.sh.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

struct alignas(128) Cell {
  std::uint64_t v[4];
};

static std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static std::uint64_t work(int id) {
  std::map<std::string, std::vector<int>> m;
  std::unordered_map<std::uint64_t, std::string> um;
  std::set<std::uint64_t> s;
  std::uint64_t h = static_cast<std::uint64_t>(id) + 1;
  for (int i = 0; i < 30000; i++) {
    h = mix(h + static_cast<std::uint64_t>(i));
    std::string key = "k" + std::to_string(h % 5000);
    m[key].push_back(i);
    um[h % 20000] = std::string(static_cast<std::size_t>(h % 200), static_cast<char>('a' + i % 26));
    s.insert(h % 100000);
    if (i % 5 == 0) {
      auto it = s.lower_bound(h % 100000);
      if (it != s.end()) s.erase(it);
    }
  }
  std::vector<std::unique_ptr<Cell>> cells;
  for (int i = 0; i < 2000; i++) {
    cells.push_back(std::make_unique<Cell>());
    if (reinterpret_cast<std::uintptr_t>(cells.back().get()) % 128 != 0) {
      std::fprintf(stderr, "misaligned Cell\n");
      std::abort();
    }
    cells.back()->v[0] = static_cast<std::uint64_t>(i);
  }
  std::uint64_t sum = 0;
  for (auto &kv : m) sum = mix(sum + kv.second.size() + kv.first.size());
  for (auto &kv : um) sum += kv.second.size();
  for (auto &c : cells) sum += c->v[0];
  return sum + s.size();
}

int main(int argc, char **argv) {
  int nthreads = argc > 1 ? std::atoi(argv[1]) : 4;
  if (nthreads < 1 || nthreads > 64) nthreads = 4;
  std::vector<std::uint64_t> results(static_cast<std::size_t>(nthreads));
  std::vector<std::thread> ths;
  for (int t = 0; t < nthreads; t++)
    ths.emplace_back([t, &results] { results[static_cast<std::size_t>(t)] = work(t); });
  for (auto &t : ths) t.join();
  for (int t = 0; t < nthreads; t++)
    std::printf("thread %d: %llu\n", t,
                static_cast<unsigned long long>(results[static_cast<std::size_t>(t)]));

  // Objects built in one thread, consumed and destroyed in another.
  std::mutex mu;
  std::vector<std::shared_ptr<std::vector<std::string>>> handoff;
  std::thread producer([&] {
    for (int i = 0; i < 200; i++) {
      auto v = std::make_shared<std::vector<std::string>>();
      for (int k = 0; k < 100; k++) v->push_back(std::string(static_cast<std::size_t>(k + i), 'z'));
      std::lock_guard<std::mutex> g(mu);
      handoff.push_back(std::move(v));
    }
  });
  producer.join();
  std::size_t total = 0;
  std::thread consumer([&] {
    std::lock_guard<std::mutex> g(mu);
    for (auto &v : handoff)
      for (auto &str : *v) total += str.size();
    handoff.clear();
  });
  consumer.join();
  std::printf("handoff total %zu\n", total);

  std::vector<std::string> words;
  for (int i = 0; i < 100000; i++)
    words.push_back(std::to_string(mix(static_cast<std::uint64_t>(i)) % 1000003));
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  std::printf("unique words %zu first %s last %s\n", words.size(), words.front().c_str(),
              words.back().c_str());
  std::vector<char> big(64u << 20, 1);
  std::printf("big %llu\n",
              static_cast<unsigned long long>(std::accumulate(big.begin(), big.end(), 0ULL)));
  return 0;
}
