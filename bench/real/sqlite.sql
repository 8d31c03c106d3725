-- sqlite.sql - an in-memory database under churn, for bench/real.py: rows inserted,
-- indexed, grouped, updated with longer text, half deleted and the rest rewritten.
-- sqlite3 allocates through malloc (its page cache, rows, statements).
PRAGMA cache_size = -65536;
CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v TEXT, n REAL);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 300000)
INSERT INTO t SELECT i, hex(randomblob(8)), hex(randomblob(abs(random()) % 120 + 8)), random() % 1000 FROM c;
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(length(v)) FROM t;
SELECT substr(k, 1, 2) AS p, count(*), avg(n) FROM t GROUP BY p ORDER BY p LIMIT 3;
UPDATE t SET v = v || hex(randomblob(32)) WHERE id % 3 = 0;
DELETE FROM t WHERE id % 2 = 0;
CREATE TABLE u AS SELECT id, k, upper(v) AS v FROM t ORDER BY k;
SELECT count(*), max(length(v)) FROM u;
DROP TABLE t;
VACUUM;
