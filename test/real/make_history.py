# make_history.py - writes a git fast-import stream for a deterministic repository of N
# commits (files that grow and change a little each time, renames, deletions), used by the
# git preload test. usage: python3 make_history.py N > stream
import sys


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    out = sys.stdout.buffer
    x = 12345

    def rnd():
        nonlocal x
        x = (x * 1103515245 + 12345) % (1 << 31)
        return x

    files = {}
    for c in range(1, n + 1):
        ts = 1600000000 + c * 3600
        changes = []
        for _ in range(1 + rnd() % 4):
            name = "src/mod%02d/file%03d.txt" % (rnd() % 12, rnd() % 40)
            lines = files.get(name, [])
            for _ in range(1 + rnd() % 30):
                pos = rnd() % (len(lines) + 1)
                lines.insert(pos, "line %d of commit %d: %s\n" % (rnd(), c, "x" * (rnd() % 60)))
            if len(lines) > 400:
                del lines[: rnd() % 100]
            files[name] = lines
            changes.append(("M", name))
        if c % 17 == 0 and len(files) > 5:
            victim = sorted(files)[rnd() % len(files)]
            del files[victim]
            changes.append(("D", victim))
        msg = ("commit %d: change %d file(s)\n\nDetails %d.\n" % (c, len(changes), rnd())).encode()
        out.write(b"commit refs/heads/main\n")
        out.write(b"mark :%d\n" % c)
        out.write(b"author Test Author <author@example.com> %d +0000\n" % ts)
        out.write(b"committer Test Committer <committer@example.com> %d +0000\n" % ts)
        out.write(b"data %d\n%s" % (len(msg), msg))
        if c > 1:
            out.write(b"from :%d\n" % (c - 1))
        for kind, name in changes:
            if kind == "D":
                out.write(b"D %s\n" % name.encode())
            elif name in files:
                body = "".join(files[name]).encode()
                out.write(b"M 100644 inline %s\ndata %d\n%s\n" % (name.encode(), len(body), body))
        if c % 50 == 0:
            out.write(b"tag v%d\nfrom :%d\ntagger T <t@example.com> %d +0000\ndata 4\ntag\n"
                      % (c // 50, c, ts))
    out.write(b"done\n")


if __name__ == "__main__":
    main()
