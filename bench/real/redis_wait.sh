# redis_wait.sh - sourced by redis.sh and redis_phases.sh: redis_wait SOCK LOG waits up to
# 10 s for the server's unix socket, and fails with the log's last lines if it never comes.
redis_wait() {
  for _ in $(seq 200); do
    [ -S "$1" ] && return 0
    sleep 0.05
  done
  echo "redis-server did not start: $(tail -3 "$2")" >&2
  exit 1
}
