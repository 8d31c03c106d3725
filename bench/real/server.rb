# server.rb - Ruby threads serving requests, for bench/real.py: each request parses a JSON
# body, builds a response of hashes, arrays and strings and renders it as JSON; one in
# four responses goes into a cache all threads share, bounded, oldest out. Ruby's
# collector frees whatever thread allocated a block from the thread that runs it.
#   ruby bench/real/server.rb [THREADS] [REQUESTS per thread]      (default 8 4000)
require "json"

THREADS = (ARGV[0] || 8).to_i
REQUESTS = (ARGV[1] || 4000).to_i
CACHE_MAX = 20_000
cache = {}
lock = Mutex.new

workers = (1..THREADS).map do |t|
  Thread.new do
    bytes = 0
    REQUESTS.times do |r|
      body = { "user" => "u#{t}-#{r}", "items" => (r % 13) + 3, "tags" => %w[a bb ccc] * (r % 4 + 1) }
      req = JSON.parse(JSON.generate(body))
      rows = Array.new(req["items"]) do |i|
        { "id" => r * 100 + i, "name" => "#{req["user"]}-item-#{i}" * (1 + i % 3),
          "tags" => req["tags"].map(&:upcase), "score" => (i * 7919 % 1000) / 10.0 }
      end
      out = JSON.generate("user" => req["user"], "rows" => rows)
      bytes += out.bytesize
      if r % 4 == 0
        lock.synchronize do
          cache[req["user"]] = out
          cache.shift while cache.size > CACHE_MAX
        end
      end
    end
    bytes
  end
end
puts workers.map(&:value).sum
