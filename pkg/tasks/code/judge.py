# rllm's judge: runs assert-style tests (HumanEval's check, MBPP's
# asserts, LeetCode's harness) in a sandbox of its own, apart from the
# reply (docs/code.md, "Reward hacking"). The test's code, its expected
# values and its comparisons live only here; the names the test takes
# from the program (the entry point, MBPP's function, LeetCode's Solution)
# are handles of objects in the reply's process, and a call of one is a
# message rllm relays there: its arguments go as plain values and its
# result comes back as one (rllm_wire.py), made of this process's own
# classes, so what the test compares is never an object of the reply's.
# rllm sends {"test": i}; a process forked for the test runs it and
# writes {"result": passed, "why": ...}; this process then writes
# {"done": {...}} with the test process's exit, CPU and wall time.
import ast, builtins, os, resource, select, signal, sys, time

import rllm_wire


def main():
    ch = rllm_wire.Channel(0, 1, "j")
    cfg = ch.recv()
    prelude = compile(cfg["prelude"], "<prelude>", "exec")
    exec(prelude, {})  # imported once here, so each test's process finds them loaded
    os.makedirs(".rllm", exist_ok=True)
    while True:
        try:
            m = ch.recv()
        except EOFError:
            return
        if "test" not in m:
            continue  # an answer for a test process already gone
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            child(cfg, prelude, cfg["tests"][m["test"]], ch)
        ch.buf = b""  # what the test's process reads is its own
        status, cpu, timed_out = wait(pid, cfg["timeout_s"])
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if timed_out:
            os.waitpid(pid, 0)
        r = {"took": time.monotonic() - start, "cpu": cpu, "err": rllm_wire.read(".rllm/err", 1 << 20)[-256:].decode("utf-8", "replace")}
        if timed_out:
            r["timeout"] = True
        elif os.WIFSIGNALED(status):
            r["exit"] = 128 + os.WTERMSIG(status)
        else:
            r["exit"] = os.WEXITSTATUS(status)
        ch.send({"done": r})


def child(cfg, prelude, src, ch):
    """The test's process: the test, with the program's names it uses
    bound to what the reply's process answers for them."""
    os.setpgid(0, 0)
    ch.rd, ch.wr = os.dup(0), os.dup(1)
    os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
    for n, p in ((1, ".rllm/out"), (2, ".rllm/err")):
        os.dup2(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), n)
    keep = sorted((ch.rd, ch.wr))
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, 1 << 16)
    rllm_wire.lower(resource.RLIMIT_CPU, cfg["cpu_s"], cfg["cpu_s"] + 1)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    ch.serve = lambda op, x, m: serve(ch, op, x, m)
    g = {"__name__": "__main__", "__builtins__": builtins}
    exec(prelude, g)
    ok, why = True, ""
    try:
        tree = ast.parse(src, "<test>")
        names = free_names(tree, g)
        if names:
            got = ch.request({"op": "names", "names": sorted(names)})
            if type(got) is not dict:
                raise TypeError("the reply's process answered %r for its names" % type(got).__name__)
            g.update({k: v for k, v in got.items() if k in names})
        exec(compile(tree, "<test>", "exec"), g)
    except SystemExit as e:
        if e.code not in (None, 0):
            ok, why = False, "the test exited with status %r" % (e.code,)
    except BaseException as e:
        ok, why = False, describe(e)
    if ch.dead is not None:
        ok, why = False, "the program's process ended: " + str(ch.dead)
    sys.stdout.flush()
    ch.send({"result": ok, "why": why[:1000]})
    os._exit(0)


def serve(ch, op, x, m):
    """What the reply may do with the test's objects it was passed (a
    function, an iterator): call them and iterate them, nothing else."""
    if op == "call" and callable(x):
        return x(*ch.dec(m.get("args", [])), **{k: ch.dec(v) for k, v in m.get("kw", {}).items()})
    if op == "next":
        return next(x)
    raise TypeError("the test's objects can only be called or iterated from the program")


def free_names(tree, g):
    """The names the test reads and never binds, that are neither
    builtins nor the prelude's: the program's names (the entry point,
    MBPP's function, Solution). A builtin or prelude name is the judge's
    own even when the program defines one of that name."""
    loaded, bound = set(), set()
    matches = tuple(getattr(ast, c) for c in ("MatchAs", "MatchStar", "MatchMapping") if hasattr(ast, c))
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.partition(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, matches):
            bound.update(x for x in (getattr(n, "name", None), getattr(n, "rest", None)) if x)
    return {n for n in loaded - bound if n not in g and not hasattr(builtins, n)}


def describe(e):
    """Why a test failed, in a line."""
    line = ""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<test>":
            line = " (line %d of the test)" % tb.tb_lineno
        tb = tb.tb_next
    if isinstance(e, rllm_wire.Dead):
        return "the program's process ended: " + str(e)
    remote = getattr(e, "rllm_remote", None)
    if remote is not None:
        return "the program raised %s%s" % (str(e) if type(e) is Exception else "%s: %s" % (remote, e), line)
    if isinstance(e, AssertionError):
        return "wrong answer: an assertion failed" + line + (": " + str(e) if str(e) else "")
    return "the test raised %s: %s%s" % (type(e).__name__, e, line)


def wait(pid, timeout):
    """Waits for pid up to timeout seconds; returns (status, the CPU
    seconds it used, timed_out)."""
    deadline = time.monotonic() + timeout
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, 0.0, True
            if pfd is not None:
                select.select([pfd], [], [], left)
            else:
                time.sleep(min(left, 0.002))
            got, status, ru = os.wait4(pid, os.WNOHANG)
            if got == pid:
                return status, ru.ru_utime + ru.ru_stime, False
    finally:
        if pfd is not None:
            os.close(pfd)


main()
