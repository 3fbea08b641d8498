# rllm's reply harness: runs in a sandbox of its own with the model's
# solution.py and nothing of the tests (docs/code.md, "Reward hacking").
# rllm sends it one message a line on stdin and reads its answers on
# stdout (rllm_wire.py). For each test it forks a process from this warm
# interpreter (no interpreter start per test), with its own process
# group, CPU rlimit and wall time, whose stdin, stdout and stderr are
# scratch files (bounded by the sandbox's file-size rlimit):
#   {"load": {"stdin": "..."}}  the program runs as a program on that
#       stdin (stdin tests; rllm compares the output it reports);
#   {"load": {"serve": true}}   the program is loaded, then its process
#       answers the requests rllm relays (a function test's call, made by
#       rllm; an assert-style test's calls, made by the test in the judge's
#       sandbox) until {"end": true}.
# When the test's process has ended (by itself, at its limits, or at
# "end") the harness removes what it left: every process of the sandbox
# that started after the harness (a process that called setsid() is out
# of reach of its group's kill) and every file of the work directory and
# /tmp, so nothing of one test reaches the next; then it reports
# {"gone": {...}}: exit status, CPU and wall time, and for stdin tests
# the output. Only this process writes to stdout: a test's process talks
# to it through pipes, and this process is non-dumpable, so no process of
# the sandbox can reach its descriptors or memory.
import builtins, os, resource, select, signal, sys, time

import rllm_wire

MAX_LINE = 64 << 20  # a line of a test's process longer than this ends it


def main():
    undumpable()
    ch = rllm_wire.Channel(0, 1, "h")
    cfg = ch.recv()
    with open("solution.py") as f:
        src = f.read()
    try:
        code = compile(src, "solution.py", "exec")
        err = ""
    except BaseException:
        code, err = None, format_exc()
    prelude = None
    if cfg["prelude"]:
        prelude = compile(cfg["prelude"], "<prelude>", "exec")
        exec(prelude, {})  # imported once here, so each test's process finds them loaded
    os.makedirs(".rllm", exist_ok=True)
    keep = set(os.listdir("."))
    me = start_time(os.getpid())[1]
    while True:
        try:
            m = ch.recv()
        except EOFError:
            return
        if "load" not in m:
            continue  # an "end" (or an answer) for a test already gone
        r = run(cfg, code, err, prelude, m["load"], ch)
        if cfg["isolated"]:
            sweep(me)
            clean(keep)
        ch.send({"gone": r})


def run(cfg, code, err, prelude, load, ch):
    """Runs one test's process and returns its report."""
    serve = bool(load.get("serve"))
    with open(".rllm/in", "w") as f:
        f.write(load.get("stdin") or "")
    req_r, req_w = os.pipe()
    ans_r, ans_w = os.pipe()
    start = time.monotonic()
    try:
        pid = os.fork()
    except OSError as e:
        for fd in (req_r, req_w, ans_r, ans_w):
            os.close(fd)
        return {"exit": 1, "err": "BlockingIOError: fork: " + str(e), "took": 0.0, "cpu": 0.0}
    if pid == 0:
        os.close(req_w)
        os.close(ans_r)
        child(cfg, code, err, prelude, serve, req_r, ans_w)
    os.close(req_r)
    os.close(ans_w)
    status, cpu, timed_out, broke = relay(ch, pid, req_w, ans_r, start + cfg["timeout_s"])
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if status is None:
        try:
            _, status, ru = os.wait4(pid, 0)
            cpu = ru.ru_utime + ru.ru_stime
        except ChildProcessError:
            status = 0
    os.close(req_w)
    os.close(ans_r)
    r = {"took": time.monotonic() - start, "cpu": cpu, "err": rllm_wire.read(".rllm/err", 1 << 20)[-256:].decode("utf-8", "replace")}
    if not serve:
        out = rllm_wire.read(".rllm/out", cfg["out_cap"] + 1)
        try:
            big = os.stat(".rllm/out").st_size > cfg["out_cap"]
        except OSError:
            big = False
        if big or len(out) > cfg["out_cap"]:
            r["over"] = True
        else:
            r["out"] = out.decode("utf-8", "replace")
    if broke:
        r["broke"] = broke
    if timed_out:
        r["timeout"] = True
    elif os.WIFSIGNALED(status):
        r["exit"] = 128 + os.WTERMSIG(status)
    else:
        r["exit"] = os.WEXITSTATUS(status)
    return r


def relay(ch, pid, req_w, ans_r, deadline):
    """Relays rllm's lines to the test's process and its lines to rllm
    until the process ends, "end" comes or the deadline passes. Returns
    (status or None when still to be waited, CPU seconds, timed out,
    why the process was stopped for its lines or "")."""
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = None
    out = b""       # for the test's process, not yet written
    part = b""      # the start of its next line
    ended = False   # "end" came
    open_ = True    # its end of the answers' pipe is open
    try:
        while True:
            # Lines rllm sent already (read with an earlier one).
            while not ended:
                i = ch.buf.find(b"\n")
                if i < 0:
                    break
                line, ch.buf = ch.buf[:i + 1], ch.buf[i + 1:]
                if line.startswith(b'{"end"'):
                    ended = True
                else:
                    out += line
            if ended:
                return None, 0.0, False, ""
            left = deadline - time.monotonic()
            if left <= 0:
                return None, 0.0, True, ""
            rd = [ch.rd] + ([ans_r] if open_ else []) + ([pfd] if pfd is not None else [])
            r, w, _ = select.select(rd, [req_w] if out else [], [], left if pfd is not None else min(left, 0.005))
            if req_w in w:
                try:
                    out = out[os.write(req_w, out[:1 << 16]):]
                except OSError:
                    out = b""  # it closed its end: it is ending
            if ch.rd in r:
                chunk = os.read(ch.rd, 1 << 16)
                if not chunk:
                    os.killpg(pid, signal.SIGKILL)
                    sys.exit(0)  # rllm is gone
                ch.buf += chunk
            if ans_r in r:
                chunk = os.read(ans_r, 1 << 16)
                open_ = bool(chunk)
                if chunk:
                    part += chunk
                    i = part.rfind(b"\n")
                    if i >= 0:
                        lines, part = part[:i + 1], part[i + 1:]
                        write_all(1, lines)
                    if len(part) > MAX_LINE:
                        return None, 0.0, False, "a line longer than %d bytes" % MAX_LINE
            got, status, ru = os.wait4(pid, os.WNOHANG)
            if got == pid:
                # Its last lines may still be in the pipe.
                rest = drain(ans_r)
                lines = (part + rest)[:(part + rest).rfind(b"\n") + 1]
                if lines:
                    write_all(1, lines)
                return status, ru.ru_utime + ru.ru_stime, False, ""
    finally:
        if pfd is not None:
            os.close(pfd)


def child(cfg, code, err, prelude, serve, req_r, ans_w):
    """The test's process: the model's program, then (serve) its answers.
    Never returns: it ends in os._exit, or its exception (or SystemExit)
    ends it as it would end `python3 solution.py`."""
    _exit = os._exit  # the model's code may replace os._exit
    os.setpgid(0, 0)
    fd = os.open(".rllm/in", os.O_RDONLY)
    os.dup2(fd, 0)
    for n, p in ((1, ".rllm/out"), (2, ".rllm/err")):
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, n)
    keep = sorted((req_r, ans_w))
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, 1 << 16)
    rllm_wire.lower(resource.RLIMIT_CPU, cfg["cpu_s"], cfg["cpu_s"] + 1)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = out = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    if code is None:
        sys.stderr.write(err)
        sys.stderr.flush()
        _exit(1)
    scope = {"__name__": cfg["name"], "__builtins__": builtins}
    if prelude is not None:
        exec(prelude, scope)
    exec(code, scope)
    out.flush()
    if not serve:
        _exit(0)
    ch = rllm_wire.Channel(req_r, ans_w, "h")
    ch.serve = lambda op, target, m: answer(ch, scope, op, target, m)
    while True:
        try:
            m = ch.recv()
        except EOFError:
            _exit(0)
        if "op" not in m:
            _exit(3)  # an answer for a request this process did not make
        ch.answer(m)
        out.flush()


def answer(ch, scope, op, x, m):
    """What a request of rllm or of the test asks of the model's objects."""
    if op == "names":
        return {n: scope[n] for n in m["names"] if n in scope}
    if op == "call":
        return x(*ch.dec(m.get("args", [])), **{k: ch.dec(v) for k, v in m.get("kw", {}).items()})
    if op == "get":
        return getattr(x, m["name"])
    if op == "iter":
        return iter(x)
    if op == "next":
        return next(x)
    if op == "len":
        return len(x)
    if op == "item":
        return x[ch.dec(m["key"])]
    if op == "bool":
        return bool(x)
    if op == "str":
        return str(x)
    if op == "repr":
        return repr(x)
    raise TypeError("unknown request " + repr(op))


def start_time(pid):
    """A process's state and start time (clock ticks after boot)."""
    with open("/proc/%d/stat" % pid, "rb") as f:
        s = f.read()
    f = s[s.rfind(b")") + 2:].split()
    return f[0], int(f[19])


def sweep(me):
    """Kills every process of the sandbox that started after this one,
    round after round until a round finds none (children forked
    meanwhile go too), and reaps what is ours. Only in a sandbox with its
    own PID namespace. Processes older than the harness are the sandbox's
    own (bwrap's PID 1; a docker container's init and its idle process,
    whose end would end the container) and are spared."""
    mine = os.getpid()
    for _ in range(50):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == mine:
                continue
            try:
                state, started = start_time(int(name))
                if started < me or state == b"Z":
                    continue
                os.kill(int(name), signal.SIGKILL)
                found = True
            except (OSError, ValueError, IndexError):
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not found:
            return


def clean(keep):
    """Removes what a test left in the work directory (all but keep), in
    .rllm (all but the harness's three files) and in /tmp (the sandbox's
    own)."""
    for d, names in ((".", set(os.listdir(".")) - keep), (".rllm", set(os.listdir(".rllm")) - {"in", "out", "err"}),
                     ("/tmp", os.listdir("/tmp"))):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isdir(p) and not os.path.islink(p):
                import shutil
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:
                    pass


def drain(fd):
    os.set_blocking(fd, False)
    b = b""
    try:
        while True:
            c = os.read(fd, 1 << 16)
            if not c:
                break
            b += c
    except OSError:
        pass
    return b


def write_all(fd, b):
    while b:
        b = b[os.write(fd, b):]


def format_exc():
    import traceback
    return traceback.format_exc(limit=0)


def undumpable():
    """Makes this process non-dumpable (and with it every test's process
    forked from it), so that no process of the sandbox (same uid, no
    capabilities) can open /proc/<pid>/fd or /proc/<pid>/mem of another
    or trace it."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass


main()
