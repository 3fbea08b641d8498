# rllm's batch test harness: runs inside the sandbox next to the model's
# solution.py and runs every stdin or function test of one reply, each in
# a process forked from this warm interpreter (no interpreter start per
# test), with its own CPU rlimit and its own wall time (the test's
# process group is killed); its stdout goes to a file (bounded by the
# sandbox's file-size rlimit) of which the first out_cap bytes are kept. It prints one JSON line per test as the test ends (so a run cut
# short keeps what it did); rllm compares the outputs outside the
# sandbox, so the expected outputs never enter it.
import builtins, json, os, resource, select, signal, sys, time, traceback

def run_child(spec, i, inp, code, paths):
    os.setpgid(0, 0)
    fd = os.open(paths[0], os.O_RDONLY)
    os.dup2(fd, 0)
    for n, p in ((1, paths[1]), (2, paths[2])):
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, n)
    lower(resource.RLIMIT_CPU, spec["cpu_s"], spec["cpu_s"] + 1)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    status = 0
    try:
        if spec["kind"] == "stdin":
            exec(code, {"__name__": "__main__", "__builtins__": builtins})
        else:
            args = [json.loads(l) for l in inp.split("\n") if l.strip()]
            scope = {"__name__": "solution", "__builtins__": builtins}
            exec(code, scope)
            if "class Solution" in spec["src"] and "Solution" in scope:
                fn = getattr(scope["Solution"](), spec["fn"])
            else:
                fn = scope[spec["fn"]]
            result = fn(*args)
            if isinstance(result, tuple):
                result = list(result)
            sys.stdout.write("\n" + spec["marker"] + "\n" + json.dumps(result) + "\n")
    except SystemExit as e:
        c = e.code
        status = c if isinstance(c, int) else (0 if c is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 1
    os._exit(status & 0xFF)

def lower(which, soft, hard):
    """Sets an rlimit no higher than the one the sandbox set."""
    _, cur = resource.getrlimit(which)
    if cur != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur), min(hard, cur)
    resource.setrlimit(which, (soft, hard))

def emit(r):
    sys.stdout.write(json.dumps(r) + "\n")
    sys.stdout.flush()

def wait(pid, timeout):
    """Waits for pid up to timeout seconds; returns (status, timed_out)."""
    deadline = time.monotonic() + timeout
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, True
        if pfd is not None:
            select.select([pfd], [], [], left)
        else:
            time.sleep(min(left, 0.002))
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            if pfd is not None:
                os.close(pfd)
            return status, False

def read(path, n):
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""

def undumpable():
    """Makes this process non-dumpable, so that the tests' processes
    (same uid, no capabilities) cannot open /proc/<harness>/fd/1 and
    write results of their own into the harness's output."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass

def main():
    undumpable()
    with open("tests.json") as f:
        spec = json.load(f)
    with open("solution.py") as f:
        spec["src"] = f.read()
    try:
        code = compile(spec["src"], "solution.py", "exec")
    except BaseException:
        err = traceback.format_exc(limit=0)
        emit({"exit": 1, "err": err[-256:]})
        return
    # In the work directory, not /tmp: the unsafe-host backend shares the
    # host's /tmp between runs.
    os.makedirs(".rllm", exist_ok=True)
    paths = (".rllm/in", ".rllm/out", ".rllm/err")
    for i, inp in enumerate(spec["inputs"]):
        with open(paths[0], "w") as f:
            f.write(inp)
        start = time.monotonic()
        try:
            pid = os.fork()
        except OSError as e:
            emit({"exit": 1, "err": "BlockingIOError: fork: " + str(e)})
            break
        if pid == 0:
            try:
                run_child(spec, i, inp, code, paths)
            finally:
                os._exit(1)
        status, timed_out = wait(pid, spec["timeout_s"])
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if timed_out:
            os.waitpid(pid, 0)
        took = time.monotonic() - start
        out = read(paths[1], spec["out_cap"] + 1)
        try:
            big = os.stat(paths[1]).st_size > spec["out_cap"]
        except OSError:
            big = False
        err = read(paths[2], 1 << 20)[-256:]
        r = {"took": took, "out": out.decode("utf-8", "replace"), "err": err.decode("utf-8", "replace")}
        if big or len(out) > spec["out_cap"]:
            r["over"] = True
            r["out"] = ""
        if timed_out:
            r["timeout"] = True
        elif os.WIFSIGNALED(status):
            r["exit"] = 128 + os.WTERMSIG(status)
        else:
            r["exit"] = os.WEXITSTATUS(status)
        emit(r)
        failed = timed_out or r.get("over") or r.get("exit")
        if failed and spec["stop_on_error"]:
            break

main()
